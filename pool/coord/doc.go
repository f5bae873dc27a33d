// Package coord lets the vigils of a pool take turns at recovering: a
// counting semaphore in etcd, each hold bound to a lease so a vigil that
// dies lets go when its lease expires, and the capacity floor that keeps
// enough members serving. It is the pool-wide lock the recovery takes
// before it drains and gives back after it restores.
package coord
