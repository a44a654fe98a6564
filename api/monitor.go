package api

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/dmsc/dmsc/fsm"
)

// LogSource is the agent's log as GET /v1/agent/monitor reads it: an
// hclog.InterceptLogger takes sinks.
type LogSource interface {
	RegisterSink(hclog.SinkAdapter)
	DeregisterSink(hclog.SinkAdapter)
}

// monitorBuffer is how many lines a monitor holds for a reader that is
// behind; more are dropped (and counted) rather than slowing the agent.
const monitorBuffer = 512

// monitorSink collects the lines of a monitor's sink: a write never
// waits.
type monitorSink struct {
	lines   chan []byte
	mu      sync.Mutex
	dropped int
}

func (m *monitorSink) Write(p []byte) (int, error) {
	select {
	case m.lines <- append([]byte(nil), p...):
	default:
		m.mu.Lock()
		m.dropped++
		m.mu.Unlock()
	}
	return len(p), nil
}

func (m *monitorSink) takeDropped() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.dropped
	m.dropped = 0
	return n
}

// GET /v1/agent/monitor
func (s *Server) monitor(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Logs == nil {
		return &fsm.Error{Code: fsm.ErrNotFound.Code, Message: "this API serves no agent log to monitor"}
	}
	q := r.URL.Query()
	level := hclog.Info
	if v := q.Get("log_level"); v != "" {
		if level = hclog.LevelFromString(v); level == hclog.NoLevel {
			return badParam("log_level", v, "want trace, debug, info, warn or error")
		}
	}
	jsonFormat, err := boolParam(q, "log_json")
	if err != nil {
		return err
	}
	release, err := s.takeStream()
	if err != nil {
		return err
	}
	defer release()
	sink := &monitorSink{lines: make(chan []byte, monitorBuffer)}
	adapter := hclog.NewSinkAdapter(&hclog.LoggerOptions{Level: level, Output: sink, JSONFormat: jsonFormat})
	s.opts.Logs.RegisterSink(adapter)
	defer s.opts.Logs.DeregisterSink(adapter)

	send := s.startStream(w, "text/plain; charset=utf-8")
	write := func(b []byte) bool { return send(b) == nil }
	if !write(nil) {
		return nil
	}
	tick := time.NewTicker(s.opts.EventHeartbeat)
	defer tick.Stop()
	for {
		select {
		case line := <-sink.lines:
			if !write(line) {
				return nil
			}
		case <-tick.C:
			if n := sink.takeDropped(); n > 0 && !write([]byte("[monitor: "+strconv.Itoa(n)+" lines dropped: the reader was behind]\n")) {
				return nil
			}
			if bad := s.tokenGone(r); bad != nil {
				return nil
			}
		case <-r.Context().Done():
			return nil
		}
	}
}
