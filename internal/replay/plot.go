package replay

import (
	"fmt"
	"image/color"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// CurveLine is one line of a curve plot: allocated % (Y[p]) at arrived
// p % for p = 0..len(Y)-1.
type CurveLine struct {
	Name string
	Y    []float64
}

// RefPoint is a published result drawn for reference.
type RefPoint struct {
	Name    string
	Arrived float64
	Alloc   float64
}

// PaperPoints are the FGD paper's results at 130 % arrived on the openb
// default pod list (mean of seeds 42-51).
var PaperPoints = []RefPoint{
	{Name: "paper FGD (95.40)", Arrived: 130, Alloc: 95.40},
	{Name: "paper BestFit (93.11)", Arrived: 130, Alloc: 93.11},
}

// palette holds distinguishable line colours.
var palette = []color.RGBA{
	{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
}

// PlotCurves draws allocated % against arrived %, one line per entry of
// lines and one marker per reference point, and saves it to path; the
// format follows the extension (.png or .svg).
func PlotCurves(title string, lines []CurveLine, refs []RefPoint, path string) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".png" && ext != ".svg" {
		return fmt.Errorf("plot %s: want a .png or .svg file", path)
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "arrived GPU demand (% of cluster GPUs)"
	p.Y.Label.Text = "allocated GPUs (% of cluster GPUs)"
	// The curves are the diagonal until the cluster fills up: show from
	// 60 % on, where the policies part.
	p.X.Min, p.X.Max = 60, CurveMax+2
	p.Y.Min, p.Y.Max = 60, 100
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	for i, l := range lines {
		var pts plotter.XYs
		for x, y := range l.Y {
			if x >= 60 {
				pts = append(pts, plotter.XY{X: float64(x), Y: y})
			}
		}
		ln, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("plot %s: %w", l.Name, err)
		}
		ln.Color = palette[i%len(palette)]
		ln.Width = vg.Points(1.2)
		p.Add(ln)
		p.Legend.Add(l.Name, ln)
	}
	shapes := []draw.GlyphDrawer{draw.CrossGlyph{}, draw.PlusGlyph{}, draw.TriangleGlyph{}, draw.BoxGlyph{}}
	for i, r := range refs {
		sc, err := plotter.NewScatter(plotter.XYs{{X: r.Arrived, Y: r.Alloc}})
		if err != nil {
			return fmt.Errorf("plot %s: %w", r.Name, err)
		}
		sc.GlyphStyle.Shape = shapes[i%len(shapes)]
		sc.GlyphStyle.Radius = vg.Points(4)
		sc.GlyphStyle.Color = color.Black
		p.Add(sc)
		p.Legend.Add(r.Name, sc)
	}
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// PlotTenants draws, per namespace of a replay with tenants, its queue
// wait p95 by arrival (FIFO) and by fair share side by side, in minutes,
// with its share of the GPU time against its entitlement in the labels;
// saved to path (.png or .svg).
func PlotTenants(title string, fifo, fair *TimelineResult, path string) error {
	if len(fifo.Tenants) != len(fair.Tenants) {
		return fmt.Errorf("plot %s: %d namespaces by FIFO, %d by fair share", path, len(fifo.Tenants), len(fair.Tenants))
	}
	var names []string
	var a, b plotter.Values
	for i, t := range fifo.Tenants {
		if t.Placed == 0 && fair.Tenants[i].Placed == 0 {
			continue
		}
		names = append(names, fmt.Sprintf("%s\n%.0f%%/%.0f%%", strings.TrimPrefix(t.Namespace, "vc-"), t.Entitlement, fair.Tenants[i].Share))
		a = append(a, t.WaitP95.Minutes())
		b = append(b, fair.Tenants[i].WaitP95.Minutes())
	}
	return pairedBars(title, "virtual cluster (entitled % / share % of GPU time with fair share)", [2]string{"FIFO", "fair share"},
		names, [2]plotter.Values{a, b}, vg.Points(9), path)
}

// pairedBars draws the queue wait p95 (minutes) of each named group by
// two runs, bars side by side, into path (.png or .svg).
func pairedBars(title, xLabel string, runs [2]string, names []string, values [2]plotter.Values, width vg.Length, path string) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".png" && ext != ".svg" {
		return fmt.Errorf("plot %s: want a .png or .svg file", path)
	}
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "queue wait p95 (minutes)"
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	for i, v := range values {
		bars, err := plotter.NewBarChart(v, width)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		bars.Color = palette[i]
		bars.LineStyle.Width = 0
		bars.Offset = vg.Length(2*i-1) * width / 2
		p.Add(bars)
		p.Legend.Add(runs[i], bars)
	}
	p.NominalX(names...)
	p.X.Label.Text = xLabel
	if err := p.Save(9*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// PlotSizes draws the queue wait p95 of each job size, with every job on
// one host and with gangs, side by side; each size's label gives the
// jobs that ran each way.
func PlotSizes(title string, one, gangs *TimelineResult, path string) error {
	if len(one.Sizes) != len(gangs.Sizes) {
		return fmt.Errorf("plot %s: %d job sizes on one host, %d with gangs", path, len(one.Sizes), len(gangs.Sizes))
	}
	var names []string
	var a, b plotter.Values
	for i, s := range one.Sizes {
		names = append(names, fmt.Sprintf("%s\n%d/%d ran", s.Label(), s.Placed, gangs.Sizes[i].Placed))
		a = append(a, s.WaitP95.Minutes())
		b = append(b, gangs.Sizes[i].WaitP95.Minutes())
	}
	return pairedBars(title, "GPUs per job (jobs that ran: one host / gangs)", [2]string{"one host", "gangs"},
		names, [2]plotter.Values{a, b}, vg.Points(12), path)
}
