// Package coord lets the vigils of a pool take turns at recovering: a
// counting semaphore in etcd, each hold bound to a lease so a vigil that
// dies lets go when its lease expires, and the capacity floor that keeps
// enough members serving. It is the pool-wide lock the recovery takes
// before it drains and gives back after it restores. Under the same
// prefix it keeps the pool's member directory: each vigil's /status URL,
// bound to a lease of its own, so the pool view needs no static list.
package coord
