package fsm

// ApplyChanged applies c at log index idx, as Apply does, and also reports
// whether the command changed what a reader of the state can see. It did
// not when it was refused (except a request refused for lack of capacity,
// which the history records), when its request ID was seen before (the
// first result is returned), or when it is a tick that expires nothing
// (it only moves the clock, which no reader waits for). A Raft adapter
// uses it to wake blocking queries only for changes.
func (s *State) ApplyChanged(idx uint64, c Command) (Result, bool) {
	if b, ok := c.(*Batch); ok {
		return s.applyBatch(idx, b)
	}
	quiet := s.quietTick(c)
	res := s.Apply(idx, c)
	changed := !quiet && res.Index == idx && (res.Err == nil || isRecorded(res.Err))
	return res, changed
}

// quietTick reports whether c is a tick that will expire nothing.
func (s *State) quietTick(c Command) bool {
	t, ok := c.(*Tick)
	if !ok {
		return false
	}
	due, ok := s.NextDeadline()
	now := max(s.now, t.Time)
	return !ok || due.UnixNano() > now
}
