package client

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Monitor streams the log of the agent at the client's first address, at
// level (trace, debug, info, warn, error; "" for info) and, with
// jsonFormat, as JSON lines. It returns once the agent has accepted the
// stream; the channel carries one log line per value and is closed when
// ctx ends or the agent goes away (a monitor is of one agent, so it is
// not resumed elsewhere).
func (c *Client) Monitor(ctx context.Context, level string, jsonFormat bool) (<-chan string, error) {
	q := url.Values{}
	if level != "" {
		q.Set("log_level", level)
	}
	if jsonFormat {
		q.Set("log_json", strconv.FormatBool(true))
	}
	lines := make(chan string, 64)
	started := make(chan error, 1)
	one := &Client{cfg: c.cfg, http: c.http, log: c.log, addrs: c.addrs[:1]}
	go func() {
		defer close(lines)
		opened := false
		_, err := one.do(ctx, &request{method: http.MethodGet, path: "/v1/agent/monitor", query: q, idempotent: true,
			extra: 100 * 365 * 24 * time.Hour, // the stream lasts until ctx ends
			stream: func(r io.Reader) error {
				opened = true
				started <- nil
				sc := bufio.NewScanner(r)
				sc.Buffer(nil, 1<<20)
				for sc.Scan() {
					select {
					case lines <- sc.Text():
					case <-ctx.Done():
						return nil
					}
				}
				return nil
			}})
		if !opened {
			started <- err
		}
	}()
	if err := <-started; err != nil {
		for range lines {
		}
		return nil, err
	}
	return lines, nil
}
