package integration

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// plotHostScale draws each cost of points against the host count, each
// relative to its value at the smallest count (so that seconds, cores and
// KiB share one axis), and saves the plot to path (.svg or .png).
func plotHostScale(points []scalePoint, path string) error {
	p := plot.New()
	p.Title.Text = "dmsc: cost against simulated hosts (3 servers, 2 vCPUs)"
	p.X.Label.Text = "hosts"
	p.Y.Label.Text = fmt.Sprintf("cost relative to %d hosts", points[0].Hosts)
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	series := []struct {
		name string
		v    func(scalePoint) float64
		c    color.RGBA
	}{
		{"time to register all", func(s scalePoint) float64 { return s.RegisterS }, color.RGBA{31, 119, 180, 255}},
		{"leader CPU (cores)", func(s scalePoint) float64 { return s.LeaderCPU }, color.RGBA{255, 127, 14, 255}},
		{"server RSS growth", func(s scalePoint) float64 { return s.ServerRSSPerHostK * float64(s.Hosts) }, color.RGBA{44, 160, 44, 255}},
		{"host-down detection", func(s scalePoint) float64 { return s.DownDetectS }, color.RGBA{214, 39, 40, 255}},
		{"hosts (linear)", func(s scalePoint) float64 { return float64(s.Hosts) }, color.RGBA{127, 127, 127, 255}},
	}
	for _, s := range series {
		base := s.v(points[0])
		if base <= 0 {
			continue
		}
		xy := make(plotter.XYs, len(points))
		for i, pt := range points {
			xy[i].X, xy[i].Y = float64(pt.Hosts), max(s.v(pt)/base, 1e-3)
		}
		line, marks, err := plotter.NewLinePoints(xy)
		if err != nil {
			return err
		}
		line.Color, marks.Color = s.c, s.c
		p.Add(line, marks)
		p.Legend.Add(s.name, line, marks)
	}
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}
