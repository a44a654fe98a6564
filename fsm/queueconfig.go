package fsm

import "time"

// SetQueueConfig sets how the queue is served, all of it at once (what
// it leaves out is off):
//   - FairShare: waiting requests are served by their namespace's share
//     (fairshare.go), with a usage half-life (HalfLife, 0 for
//     DefaultHalfLife); off, by priority then arrival, and the usage is
//     forgotten.
//   - PreemptWaiting: a waiting request whose policy preempts may, each
//     time the queue is examined, preempt lower-priority work by the same
//     rule as on arrival (preempt.go); off, only on arrival.
//
// A new command type rather than a change to an old one, so that a
// replica of an earlier release never applies the log differently.
type SetQueueConfig struct {
	Meta
	FairShare      bool          `json:"fair_share,omitempty"`
	HalfLife       time.Duration `json:"half_life,omitempty"`
	PreemptWaiting bool          `json:"preempt_waiting,omitempty"`
}

func (*SetQueueConfig) Type() CommandType { return SetQueueConfigType }

// QueueConfig is how the queue is served (SetQueueConfig).
type QueueConfig struct {
	FairShare      bool          `json:"fair_share"`
	HalfLife       time.Duration `json:"half_life"`
	PreemptWaiting bool          `json:"preempt_waiting"`
}

// QueueConfig returns how the queue is served now; HalfLife is set when
// FairShare is.
func (s *State) QueueConfig() QueueConfig {
	c := QueueConfig{PreemptWaiting: s.preemptWaiting}
	if s.fair != nil {
		c.FairShare, c.HalfLife = true, time.Duration(s.fair.halfLife)
	}
	return c
}

func precheckQueueConfig(c *SetQueueConfig) *Error {
	if c.HalfLife < 0 || c.HalfLife > MaxDuration {
		return errf(ErrInvalid, "half-life %v out of [0, %v]", c.HalfLife, MaxDuration)
	}
	if !c.FairShare && c.HalfLife != 0 {
		return errf(ErrInvalid, "a half-life goes with fair share")
	}
	return nil
}

func (s *State) setQueueConfig(c *SetQueueConfig) Result {
	if err := precheckQueueConfig(c); err != nil {
		return Result{Err: err}
	}
	if c.FairShare {
		s.startFairShare(c.HalfLife)
	} else {
		s.fair = nil
	}
	s.preemptWaiting = c.PreemptWaiting
	s.kickQueue()
	return Result{}
}
