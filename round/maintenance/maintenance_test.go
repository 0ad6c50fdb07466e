package maintenance

import (
	"strings"
	"testing"
	"time"
)

func mustCompile(t *testing.T, decls ...Declared) Schedule {
	t.Helper()
	s, err := Compile(decls)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return s
}

func tm(t *testing.T, zone, v string) time.Time {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	x, err := time.ParseInLocation("2006-01-02 15:04", v, loc)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestCompileRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		decls []Declared
		want  string
	}{
		{"unknown zone", []Declared{{Days: []string{"sat"}, Start: "22:00", End: "04:00", TimeZone: "Mars/Olympus"}},
			`windows[0].time_zone: "Mars/Olympus" is not an IANA time zone`},
		{"local zone", []Declared{{Days: []string{"sat"}, Start: "22:00", End: "04:00", TimeZone: "Local"}},
			`"Local" is not an IANA time zone`},
		{"no zone", []Declared{{Days: []string{"sat"}, Start: "22:00", End: "04:00"}}, "windows[0].time_zone: is empty"},
		{"empty window", []Declared{{Days: []string{"sat"}, Start: "22:00", End: "22:00", TimeZone: "UTC"}},
			"windows[0].end: 22:00 equals start 22:00: the window is empty"},
		{"no days", []Declared{{Start: "22:00", End: "23:00", TimeZone: "UTC"}}, "windows[0].days: is empty"},
		{"bad day", []Declared{{Days: []string{"caturday"}, Start: "22:00", End: "23:00", TimeZone: "UTC"}}, `"caturday" is not a day`},
		{"day twice", []Declared{{Days: []string{"sat", "Saturday"}, Start: "22:00", End: "23:00", TimeZone: "UTC"}}, `"Saturday" is listed twice`},
		{"bad time", []Declared{{Days: []string{"sat"}, Start: "25:00", End: "23:00", TimeZone: "UTC"}}, `windows[0].start: "25:00" is not a time of day`},
		{"not a time", []Declared{{Days: []string{"sat"}, Start: "10pm", End: "23:00", TimeZone: "UTC"}}, `"10pm" is not a time HH:MM`},
		{"24:00 start", []Declared{{Days: []string{"sat"}, Start: "24:00", End: "23:00", TimeZone: "UTC"}}, `windows[0].start: "24:00"`},
		{"overlap same zone", []Declared{
			{Days: []string{"sat"}, Start: "20:00", End: "23:00", TimeZone: "UTC"},
			{Days: []string{"sat"}, Start: "22:00", End: "02:00", TimeZone: "UTC"}}, "windows[0] and windows[1] overlap"},
		{"overlap across midnight into next day", []Declared{
			{Days: []string{"fri"}, Start: "22:00", End: "06:00", TimeZone: "UTC"},
			{Days: []string{"sat"}, Start: "05:00", End: "07:00", TimeZone: "UTC"}}, "windows[0] and windows[1] overlap"},
		{"overlap across zones", []Declared{
			{Days: []string{"sat"}, Start: "20:00", End: "23:00", TimeZone: "UTC"},
			{Days: []string{"sat"}, Start: "22:30", End: "23:30", TimeZone: "Europe/Berlin"}}, "windows[0] and windows[1] overlap"},
		{"every error at once", []Declared{
			{Days: []string{"sat"}, Start: "22:00", End: "22:00", TimeZone: "Nowhere/Zone"}}, "time_zone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(tc.decls)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Compile error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestCompileAccepts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		decls []Declared
	}{
		{"none", nil},
		{"touching windows join", []Declared{
			{Days: []string{"sat"}, Start: "20:00", End: "24:00", TimeZone: "UTC"},
			{Days: []string{"sun"}, Start: "00:00", End: "04:00", TimeZone: "UTC"}}},
		{"same hours in zones that do not overlap", []Declared{
			{Days: []string{"sat"}, Start: "01:00", End: "03:00", TimeZone: "UTC"},
			{Days: []string{"sat"}, Start: "01:00", End: "03:00", TimeZone: "America/New_York"}}},
		{"full day", []Declared{{Days: []string{"sun"}, Start: "00:00", End: "24:00", TimeZone: "UTC"}}},
	} {
		t.Run(tc.name, func(t *testing.T) { mustCompile(t, tc.decls...) })
	}
}

func TestAdmitStart(t *testing.T) {
	// Tuesday and Thursday 22:00-04:00 in Berlin.
	berlin := mustCompile(t, Declared{Days: []string{"tue", "thu"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"})
	exp2h := Expected{Length: 2 * time.Hour, Source: "median"}
	for _, tc := range []struct {
		name      string
		s         Schedule
		now       time.Time
		exp       Expected
		admit     bool
		nextFit   time.Time
		reasonHas string
	}{
		{"unrestricted", Schedule{}, tm(t, "UTC", "2026-03-03 12:00"), exp2h, true, time.Time{}, ""},
		{"inside with room", berlin, tm(t, "Europe/Berlin", "2026-03-03 23:00"), exp2h, true, time.Time{}, ""},
		{"exactly fits", berlin, tm(t, "Europe/Berlin", "2026-03-04 02:00"), exp2h, true, time.Time{}, ""},
		{"cutoff: too little left", berlin, tm(t, "Europe/Berlin", "2026-03-04 02:01"), exp2h, false,
			tm(t, "Europe/Berlin", "2026-03-05 22:00"), "too little for the node's expected window of 2h0m0s (median)"},
		{"outside: next window", berlin, tm(t, "Europe/Berlin", "2026-03-04 12:00"), exp2h, false,
			tm(t, "Europe/Berlin", "2026-03-05 22:00"), "outside the maintenance windows"},
		{"the same instant seen from UTC", berlin, tm(t, "UTC", "2026-03-04 11:00"), exp2h, false,
			tm(t, "Europe/Berlin", "2026-03-05 22:00"), "outside"},
		{"nothing long enough", berlin, tm(t, "Europe/Berlin", "2026-03-04 12:00"), Expected{Length: 7 * time.Hour, Source: "estimate"}, false,
			time.Time{}, "no maintenance window in the next 400 days is that long (the longest is 6h0m0s)"},
		{"no estimate: any open window", berlin, tm(t, "Europe/Berlin", "2026-03-04 03:59"), Expected{Source: "none"}, true, time.Time{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := AdmitStart(tc.s, tc.now, tc.exp)
			if d.Admit != tc.admit || !d.NextFit.Equal(tc.nextFit) || !strings.Contains(d.Reason, tc.reasonHas) {
				t.Fatalf("AdmitStart = %+v, want admit %v next %s reason containing %q", d, tc.admit, tc.nextFit, tc.reasonHas)
			}
			if !d.Admit && d.Reason == "" {
				t.Fatal("a refusal without a reason")
			}
		})
	}
}

// DST: a Sunday 01:00-04:00 window in New York is 2h long on the day
// clocks spring forward and 4h long on the day they fall back.
func TestDST(t *testing.T) {
	s := mustCompile(t, Declared{Days: []string{"sun"}, Start: "01:00", End: "04:00", TimeZone: "America/New_York"})
	spring := tm(t, "America/New_York", "2026-03-08 01:00")
	if cur, ok := s.Current(spring); !ok || cur.Len() != 2*time.Hour {
		t.Fatalf("spring-forward window = %v %v, want 2h", cur, ok)
	}
	d := AdmitStart(s, spring, Expected{Length: 150 * time.Minute, Source: "median"})
	if d.Admit || !d.NextFit.Equal(tm(t, "America/New_York", "2026-03-15 01:00")) {
		t.Fatalf("2h30m on the spring-forward night: %+v, want refused until next Sunday", d)
	}
	fall := tm(t, "America/New_York", "2026-11-01 01:00")
	if cur, ok := s.Current(fall); !ok || cur.Len() != 4*time.Hour {
		t.Fatalf("fall-back window = %v %v, want 4h", cur, ok)
	}
	if d := AdmitStart(s, fall, Expected{Length: 210 * time.Minute, Source: "median"}); !d.Admit {
		t.Fatalf("3h30m fits the fall-back night: %+v", d)
	}
	// A window starting in the skipped hour starts when the clocks jump.
	gap := mustCompile(t, Declared{Days: []string{"sun"}, Start: "02:30", End: "05:00", TimeZone: "America/New_York"})
	cur, ok := gap.Current(tm(t, "America/New_York", "2026-03-08 04:00"))
	if !ok || !cur.Start.Equal(tm(t, "America/New_York", "2026-03-08 03:00")) {
		t.Fatalf("window in the skipped hour = %v %v", cur, ok)
	}
}

func TestJoinedWindowsAdmitAcrossMidnight(t *testing.T) {
	s := mustCompile(t,
		Declared{Days: []string{"sat"}, Start: "22:00", End: "24:00", TimeZone: "UTC"},
		Declared{Days: []string{"sun"}, Start: "00:00", End: "03:00", TimeZone: "UTC"})
	if d := AdmitStart(s, tm(t, "UTC", "2026-03-07 23:00"), Expected{Length: 3 * time.Hour}); !d.Admit {
		t.Fatalf("touching windows are one: %+v", d)
	}
}

func TestWindowTimeAndResume(t *testing.T) {
	s := mustCompile(t, Declared{Days: []string{"mon", "wed"}, Start: "20:00", End: "23:00", TimeZone: "UTC"})
	from := tm(t, "UTC", "2026-03-02 21:00") // Monday, inside
	to := tm(t, "UTC", "2026-03-04 22:00")   // Wednesday, inside
	if got, want := s.WindowTime(from, to), 4*time.Hour; got != want {
		t.Fatalf("WindowTime = %s, want %s", got, want)
	}
	if got := s.WindowTime(to, from); got != 0 {
		t.Fatalf("WindowTime backwards = %s", got)
	}
	next, ok := s.NextOpen(from)
	if !ok || !next.Start.Equal(tm(t, "UTC", "2026-03-04 20:00")) {
		t.Fatalf("NextOpen = %v %v", next, ok)
	}
	// A node that cannot fit tonight resumes at the next window.
	at, ok := s.Fit(tm(t, "UTC", "2026-03-02 22:30"), time.Hour)
	if !ok || !at.Equal(tm(t, "UTC", "2026-03-04 20:00")) {
		t.Fatalf("Fit = %v %v", at, ok)
	}
}

func TestExpectedWindow(t *testing.T) {
	for _, tc := range []struct {
		name   string
		closed []time.Duration
		est    time.Duration
		want   Expected
	}{
		{"estimate", nil, time.Hour, Expected{time.Hour, "estimate"}},
		{"nothing", nil, 0, Expected{0, "none"}},
		{"odd median", []time.Duration{3 * time.Hour, time.Hour, 2 * time.Hour}, time.Minute, Expected{2 * time.Hour, "median"}},
		{"even median", []time.Duration{time.Hour, 2 * time.Hour}, 0, Expected{90 * time.Minute, "median"}},
		{"non-positive ignored", []time.Duration{0, -time.Hour}, time.Hour, Expected{time.Hour, "estimate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ExpectedWindow(tc.closed, tc.est); got != tc.want {
				t.Fatalf("ExpectedWindow = %+v, want %+v", got, tc.want)
			}
		})
	}
}
