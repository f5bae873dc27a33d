package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// cutProxy is one member's own way to etcd: a loopback TCP proxy that can
// be cut (every connection closed, new ones refused) and healed, so a
// member loses etcd while the others keep it.
type cutProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
}

func newCutProxy(target string) (*cutProxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &cutProxy{l: l, target: strings.TrimPrefix(target, "http://"), conns: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

func (p *cutProxy) URL() string { return "http://" + p.l.Addr().String() }

func (p *cutProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		go p.pipe(c)
	}
}

func (p *cutProxy) pipe(c net.Conn) {
	defer p.drop(c)
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		up.Close()
		return
	}
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	defer p.drop(up)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

func (p *cutProxy) drop(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Cut closes every connection and refuses new ones until Heal.
func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

func (p *cutProxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

func (p *cutProxy) Close() { p.Cut(); p.l.Close() }

// etcdLoad reads what etcd carried: the gRPC requests it handled (from
// its /metrics) and the leases alive now.
type etcdLoad struct {
	endpoint string
	client   *clientv3.Client
}

func newEtcdLoad(endpoint string) (*etcdLoad, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	return &etcdLoad{endpoint: endpoint, client: c}, nil
}

// requests sums grpc_server_handled_total (unary calls answered) and
// grpc_server_msg_received_total of streams (keepalives, watch creates):
// every message etcd took in. A restart resets them; the caller adds up.
func (l *etcdLoad) requests() (float64, error) {
	resp, err := http.Get(l.endpoint + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var total float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "grpc_server_msg_received_total{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			total += v
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return total, nil
}

// leases counts the leases alive now.
func (l *etcdLoad) leases(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	r, err := l.client.Leases(ctx)
	if err != nil {
		return 0, err
	}
	return len(r.Leases), nil
}

func (l *etcdLoad) Close() error { return l.client.Close() }
