package promotion

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Proof is an upstream outcome record whose statement verified: who
// certified it, and where it lies.
type Proof struct {
	Outcome   Outcome
	Path      string
	Principal string
}

// Rejected is an outcome record that proves nothing, and why.
type Rejected struct {
	Path string
	Why  string
}

// Promoted is a person's verified statement promoting a kernel into this
// environment's round without proof from upstream.
type Promoted struct {
	Kernel     string
	Principal  string
	Reason     string
	ApprovalID string
}

// Gate is what the promotion of kernels into one environment's round is
// judged on.
type Gate struct {
	// Environment is this round's environment, Upstream the one a kernel
	// must close a round in first.
	Environment, Upstream string
	// Soak is how long a kernel runs upstream after its round closed
	// before it may be planned here.
	Soak time.Duration
	Now  time.Time
	// Proofs are the upstream environment's verified outcome records;
	// Rejected the ones that proved nothing.
	Proofs   []Proof
	Rejected []Rejected
	Promoted []Promoted
}

// Verdict is whether a target kernel may be planned, and what the plan
// says about it.
type Verdict struct {
	Kernel string `json:"kernel"`
	// Nvidia are the NVIDIA packages ("name version") the plan moves with
	// the kernel, judged with it.
	Nvidia []string `json:"nvidia,omitempty"`
	Proven bool     `json:"proven"`
	// Why is the proof in words (or the person's promotion), or what is
	// missing.
	Why string `json:"why"`
	// Fix says what a person does when it is not proven.
	Fix string `json:"fix,omitempty"`
	// Risk is set when a person promoted the kernel without proof: a
	// residual risk the report names.
	Risk string `json:"risk,omitempty"`
}

// Judge decides one target kernel. A person's verified promotion wins;
// otherwise any upstream round where the kernel fell back, was rolled back
// or failed a check blocks it; otherwise the earliest upstream round that
// closed green with it proves it once its soak has run.
func (g Gate) Judge(kernel string) Verdict { return g.JudgeWith(kernel, nil) }

// Key names a kernel with the NVIDIA packages moved with it, as the
// plan's verdicts are keyed.
func Key(kernel string, nvidia []string) string {
	if len(nvidia) == 0 {
		return kernel
	}
	return kernel + " with " + strings.Join(nvidia, ", ")
}

// JudgeWith decides one target kernel with the NVIDIA driver or module
// packages ("name version") the plan moves with it: besides the kernel,
// the green upstream round that proves it must have installed each of
// them with it (a person's promotion of the kernel covers them).
func (g Gate) JudgeWith(kernel string, nvidia []string) Verdict {
	v := Verdict{Kernel: kernel, Nvidia: slices.Clone(nvidia)}
	if i := slices.IndexFunc(g.Promoted, func(p Promoted) bool { return p.Kernel == kernel }); i >= 0 {
		p := g.Promoted[i]
		v.Proven = true
		v.Why = fmt.Sprintf("promoted into %s by %s without proof from %s (statement %s)", g.Environment, p.Principal, g.Upstream, p.ApprovalID)
		v.Risk = fmt.Sprintf("kernel %s runs in %s without a soaked green round in %s: %s promoted it (%s)", kernel, g.Environment, g.Upstream, p.Principal, p.Reason)
		return v
	}
	v.Fix = fmt.Sprintf("Let %s close a green round in %s and soak %s, or have a person promote it anyway (record_decision kernel_promoted: a signed statement naming the kernel, %s and the reason).",
		kernel, g.Upstream, durationWords(g.Soak), g.Environment)
	proofs := slices.Clone(g.Proofs)
	slices.SortFunc(proofs, func(a, b Proof) int { return a.Outcome.Closed.Compare(b.Outcome.Closed) })
	var bad, notGreen, otherNvidia []string
	var green *Proof
	for i, p := range proofs {
		o := p.Outcome
		if o.Environment != g.Upstream {
			continue
		}
		k, ok := o.Kernel(kernel)
		if !ok {
			continue
		}
		switch {
		case len(k.FellBack) > 0:
			bad = append(bad, fmt.Sprintf("fell back on %s in %s's round %s", names(k.FellBack), o.Environment, o.Round))
		case len(k.RolledBack) > 0:
			bad = append(bad, fmt.Sprintf("was rolled back on %s in %s's round %s", names(k.RolledBack), o.Environment, o.Round))
		case len(k.Red) > 0:
			bad = append(bad, fmt.Sprintf("failed checks (%s) in %s's round %s", names(k.Red), o.Environment, o.Round))
		case !o.Green():
			notGreen = append(notGreen, fmt.Sprintf("%s's round %s did not close green (%s)", o.Environment, o.Round, notGreenWhy(o)))
		case !k.Green():
			notGreen = append(notGreen, fmt.Sprintf("%s's round %s promoted it on no node", o.Environment, o.Round))
		case green == nil:
			if missing := missingNvidia(k, nvidia); len(missing) > 0 {
				otherNvidia = append(otherNvidia, fmt.Sprintf("%s's round %s closed green with it but without NVIDIA %s", o.Environment, o.Round, strings.Join(missing, ", ")))
				continue
			}
			green = &proofs[i]
		}
	}
	switch {
	case len(bad) > 0:
		v.Why = "kernel " + kernel + " " + strings.Join(bad, "; ")
	case green == nil && len(otherNvidia) > 0:
		v.Why = "kernel " + kernel + " with NVIDIA " + strings.Join(nvidia, ", ") + " never closed a round in " + g.Upstream + ": " + strings.Join(otherNvidia, "; ")
		v.Fix = fmt.Sprintf("Let %s close a green round with these NVIDIA packages and soak %s, pin the NVIDIA packages to the versions %s ran, or have a person promote the kernel anyway (record_decision kernel_promoted).",
			g.Upstream, durationWords(g.Soak), g.Upstream)
	case green != nil:
		until := green.Outcome.Closed.Add(g.Soak)
		closed := green.Outcome.Closed.UTC().Format(timeWords)
		if g.Now.Before(until) {
			v.Why = fmt.Sprintf("kernel %s is still soaking in %s until %s (round %s closed green %s)", kernel, g.Upstream, until.UTC().Format(timeWords), green.Outcome.Round, closed)
			break
		}
		v.Proven = true
		v.Fix = ""
		v.Why = fmt.Sprintf("kernel %s closed green in %s's round %s on %s (certified by %s, %s) and soaked %s until %s",
			kernel, g.Upstream, green.Outcome.Round, closed, green.Principal, green.Path, durationWords(g.Soak), until.UTC().Format(timeWords))
		if len(nvidia) > 0 {
			v.Why += "; with NVIDIA " + strings.Join(nvidia, ", ")
		}
	case len(notGreen) > 0:
		v.Why = "kernel " + kernel + ": " + strings.Join(notGreen, "; ")
	default:
		v.Why = fmt.Sprintf("kernel %s never closed a round in %s", kernel, g.Upstream)
	}
	if !v.Proven && len(g.Rejected) > 0 {
		var rs []string
		for _, r := range g.Rejected {
			rs = append(rs, r.Path+" ("+r.Why+")")
		}
		v.Why += "; upstream records that prove nothing: " + strings.Join(rs, "; ")
	}
	return v
}

// missingNvidia are the packages of want that k's round did not install
// with it (an NVIDIA package at another version is missing).
func missingNvidia(k Kernel, want []string) []string {
	var out []string
	for _, p := range want {
		if !slices.Contains(k.Nvidia, p) {
			out = append(out, p)
		}
	}
	return out
}

func notGreenWhy(o Outcome) string {
	switch {
	case o.Aborted:
		return "aborted"
	case !o.FleetCheck:
		return "its fleet kernel check was not green"
	}
	return "not closed"
}

func durationWords(d time.Duration) string {
	switch {
	case d <= 0:
		return "no time"
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%d day(s)", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%d hour(s)", d/time.Hour)
	}
	return d.String()
}
