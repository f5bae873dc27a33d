package calls

import (
	"crypto/sha256"
	"io"

	"github.com/vigil-dev/vigil/admission/core"
)

// Key identifies one call across its attempts: a keyed call's KeyOf or a
// keyless one's Fingerprint. It is the core's call key, so a call keeps
// its queue place across attempts by the same value.
type Key = core.CallKey

// KeyOf is a keyed call's key: the tenant's key hash, the idempotency key,
// the method, the path with its query, and the body, hashed with SHA-256
// so that a reused idempotency key with another body is another call.
func KeyOf(tenant, idem, method, uri string, body []byte) Key {
	return hash(body, tenant, idem, method, uri)
}

// Fingerprint identifies a call without an idempotency key: the tenant's
// key hash, the method, the path with its query and the exact body. It is
// never equal to a KeyOf (another domain), so a keyless call never finds a
// keyed one's execution.
func Fingerprint(tenant, method, uri string, body []byte) Key {
	return hash(body, "fingerprint", tenant, method, uri)
}

func hash(body []byte, parts ...string) Key {
	h := sha256.New()
	for _, s := range parts {
		_, _ = io.WriteString(h, s)
		_, _ = h.Write([]byte{0})
	}
	_, _ = h.Write(body)
	var k Key
	h.Sum(k[:0])
	return k
}
