// Package fsm is the deterministic device-scheduling state machine of dmsc:
// hosts, devices, pools, allocations, the queue of pending requests, the
// placement policies, history, statistics and recommendations. It is a
// pure function of the command log: no network, no clock, no randomness.
// Time comes from the leader's stamp in each command; ties are broken by
// device ID; every cursor lives in the state. See DESIGN.md in this folder.
package fsm
