// Package testinfra starts real infrastructure for tests (HAProxy with an
// admin runtime socket, a private dockerd with containers made by "docker
// import", etcd, llama.cpp's llama-server from the build that
// e2e/llamacpp/build.sh caches) and tears it all down, skipping loudly
// (or failing, when CI requires it) where the host cannot run it.
//
// A package whose tests use StartDockerd must stop the daemon at the end:
//
//	func TestMain(m *testing.M) { os.Exit(testinfra.Run(m)) }
package testinfra
