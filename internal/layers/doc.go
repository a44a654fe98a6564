// Package layers holds one test and no code: that the packages of this
// module import each other only down the layers (fsm at the bottom, then
// transport, cluster, api, and cmd at the top), that the state machine
// imports nothing of Raft, and that the Go SDK imports nothing of the
// server. layers_test.go has the table of the layers.
package layers
