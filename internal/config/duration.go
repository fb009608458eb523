package config

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration written as a Go duration string ("10s").
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String formats d as a Go duration string.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a Go duration string. A bare number is refused: "10"
// could mean seconds or nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"10s\", not %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}

// Port is a port by name ("http") or number (8080), as a Service port is
// named in YAML: a string or a number.
type Port struct {
	Name   string
	Number int32
}

// MarshalJSON writes the name or the number.
func (p Port) MarshalJSON() ([]byte, error) {
	if p.Name != "" {
		return json.Marshal(p.Name)
	}
	return json.Marshal(p.Number)
}

// UnmarshalJSON reads a name or a number.
func (p *Port) UnmarshalJSON(b []byte) error {
	var n int32
	if err := json.Unmarshal(b, &n); err == nil {
		*p = Port{Number: n}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("port must be a name or a number, not %s", b)
	}
	*p = Port{Name: s}
	return nil
}

func (p Port) String() string {
	if p.Name != "" {
		return p.Name
	}
	return fmt.Sprint(p.Number)
}
