package mrc

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/robinhoodcache/robinhood/lib/bytesize"
)

var palette = []string{"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// WriteSVG draws the curves: miss ratio against cache size (log scale), one
// line per backend, with a legend.
func WriteSVG(w io.Writer, curves []Curve, title string) error {
	const width, height, left, right, top, bottom = 760.0, 420.0, 60.0, 150.0, 30.0, 50.0
	pw, ph := width-left-right, height-top-bottom
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range curves {
		for _, p := range c.Points {
			lo, hi = math.Min(lo, math.Log2(float64(p.Bytes))), math.Max(hi, math.Log2(float64(p.Bytes)))
		}
	}
	if math.IsInf(lo, 0) {
		return fmt.Errorf("no curves to draw")
	}
	if hi == lo {
		hi = lo + 1
	}
	x := func(b int64) float64 { return left + (math.Log2(float64(b))-lo)/(hi-lo)*pw }
	y := func(mr float64) float64 { return top + (1-mr)*ph }
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&sb, `<rect width="100%%" height="100%%" fill="white"/><text x="%g" y="18" font-size="14">%s</text>`+"\n", left, xmlEscape(title))
	for i := 0; i <= 4; i++ { // y grid
		mr := float64(i) / 4
		fmt.Fprintf(&sb, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/><text x="%g" y="%.1f" text-anchor="end">%.2f</text>`+"\n",
			left, y(mr), left+pw, y(mr), left-6, y(mr)+4, mr)
	}
	for e := math.Ceil(lo); e <= hi; e++ { // x grid at powers of two
		b := int64(math.Exp2(e))
		fmt.Fprintf(&sb, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#eee"/><text x="%.1f" y="%g" text-anchor="middle">%s</text>`+"\n",
			x(b), top, x(b), top+ph, x(b), top+ph+16, bytesize.Format(b))
	}
	fmt.Fprintf(&sb, `<text x="%g" y="%g" text-anchor="middle">cache size</text>`+"\n", left+pw/2, height-10)
	fmt.Fprintf(&sb, `<text x="14" y="%g" transform="rotate(-90 14 %g)" text-anchor="middle">miss ratio</text>`+"\n", top+ph/2, top+ph/2)
	for i, c := range curves {
		color := palette[i%len(palette)]
		var pts []string
		for _, p := range c.Points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.Bytes), y(p.MissRatio)))
		}
		fmt.Fprintf(&sb, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`+"\n", color, strings.Join(pts, " "))
		ly := top + 14*float64(i)
		fmt.Fprintf(&sb, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="2"/><text x="%g" y="%g">%s</text>`+"\n",
			left+pw+10, ly, left+pw+28, ly, color, left+pw+32, ly+4, xmlEscape(c.Backend))
	}
	sb.WriteString("</svg>\n")
	_, err := io.WriteString(w, sb.String())
	return err
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
