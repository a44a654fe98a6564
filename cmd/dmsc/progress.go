package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progressBar draws "label [=====     ] 12/70 17% 42s" on one line,
// redrawn in place every second and on progress (at most twice a second,
// at once when the total changes).
type progressBar struct {
	w     io.Writer
	label string
	start time.Time
	mu    sync.Mutex
	n     int
	total int
	drawn time.Time
	stop  chan struct{}
	wg    sync.WaitGroup
}

// newProgressBar draws an empty bar; set moves it.
func newProgressBar(w io.Writer, label string) *progressBar {
	b := &progressBar{w: w, label: label, start: time.Now(), stop: make(chan struct{})}
	b.draw(true)
	b.wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-b.stop:
				return
			case <-t.C:
				b.mu.Lock()
				b.draw(false)
				b.mu.Unlock()
			}
		}
	})
	return b
}

// set records the work done and the total.
func (b *progressBar) set(done, total int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	changed := total != b.total
	b.n, b.total = done, total
	b.draw(changed)
}

// draw redraws the line; the caller holds mu (or owns b).
func (b *progressBar) draw(force bool) {
	now := time.Now()
	if !force && now.Sub(b.drawn) < 500*time.Millisecond {
		return
	}
	b.drawn = now
	const width = 30
	frac := 0.0
	if b.total > 0 {
		frac = min(float64(b.n)/float64(b.total), 1)
	}
	fill := int(frac * width)
	el := now.Sub(b.start).Round(time.Second)
	fmt.Fprintf(b.w, "\r%s [%s%s] %d/%d %3.0f%% %v ", b.label, strings.Repeat("=", fill), strings.Repeat(" ", width-fill), b.n, b.total, 100*frac, el)
}

// done draws the final state and ends the line.
func (b *progressBar) done() {
	close(b.stop)
	b.wg.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.draw(true)
	fmt.Fprintln(b.w)
}
