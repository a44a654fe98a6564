package main

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/cli"
)

// safeText escapes what a terminal would act on rather than show: control
// characters other than newline and tab (an escape sequence's ESC is
// written \x1b), DEL, C1 controls, Unicode bidirectional overrides, and
// bytes that are not UTF-8 (\xff). IDs from the API cannot hold these,
// but host labels, reasons and messages, or a server that is not dmsc,
// may. -json output is escaped by encoding/json and passes unchanged.
func safeText(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x20 && r != '\n' && r != '\t', r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r <= 0x9f, isBidiControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 && c != '\n' && c != '\t' || c == 0x7f || c >= 0x80 {
			if c >= 0x80 {
				return !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return r >= 0x80 && r <= 0x9f || isBidiControl(r) }) >= 0
			}
			return true
		}
	}
	return false
}

// isBidiControl reports the characters that reorder text on screen.
func isBidiControl(r rune) bool {
	return r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 || r == 0x200e || r == 0x200f || r == 0x061c
}

// safeUI escapes every line the commands print (safeText): tables, plain
// text, messages and errors alike.
type safeUI struct{ cli.Ui }

func (u safeUI) Output(s string) { u.Ui.Output(safeText(s)) }
func (u safeUI) Info(s string)   { u.Ui.Info(safeText(s)) }
func (u safeUI) Error(s string)  { u.Ui.Error(safeText(s)) }
func (u safeUI) Warn(s string)   { u.Ui.Warn(safeText(s)) }
