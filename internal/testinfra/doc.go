// Package testinfra starts real infrastructure for tests (HAProxy with an
// admin runtime socket, a private dockerd with containers made by "docker
// import", etcd, llama.cpp's llama-server from the build that
// e2e/llamacpp/build.sh caches) and tears it all down, skipping loudly
// (or failing, when CI requires it) where the host cannot run it. Beside
// them, what the end-to-end harnesses share: vigil itself run as a
// subprocess (StartVigil, which fails rather than skips: it is the code
// under test) and closed-loop clients (StartLoad). LaunchEtcd starts etcd
// without a test, for a bench main. And the set-up several packages'
// tests repeat: a fast config for the daemon (DaemonConfig; the simulated
// engine it is aimed at is started by the subpackage simengine, apart
// because enginesim's own tests use this package), a slow backend and a
// served agent or health check behind HAProxy (SlowBackend, Serve,
// HAProxyHead).
//
// A package whose tests use StartDockerd must stop the daemon at the end:
//
//	func TestMain(m *testing.M) { os.Exit(testinfra.Run(m)) }
package testinfra
