package rbac_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/actors"
	"github.com/mcp-patch/mcp-patch/kube/rbac"
)

// request is one API request the code makes: verb on group/resource.
type request struct{ Group, Resource, Verb string }

func (r request) String() string { return fmt.Sprintf("%s %s (group %q)", r.Verb, r.Resource, r.Group) }

// call is a request and where the code makes it.
type call struct {
	request
	At string
}

// skipDirs hold no production code that talks to a cluster: the lab and
// test support (their own admin client), other modules.
var skipDirs = map[string]string{
	"lab":                  "the lab, its admin client builds the cluster",
	"test":                 "other Go modules (interop, promrules)",
	"internal/testsupport": "test support (labkube's admin client, apifake's fake API server)",
	"cmd/mcp-patch-lab":    "the lab's binary",
}

// groupOf maps a typed clientset's group accessor to its API group. An
// accessor not listed fails the scan: add it here with its group.
var groupOf = map[string]string{
	"CoreV1":                  "",
	"AppsV1":                  "apps",
	"PolicyV1":                "policy",
	"BatchV1":                 "batch",
	"CoordinationV1":          "coordination.k8s.io",
	"AdmissionregistrationV1": "admissionregistration.k8s.io",
	"AuthorizationV1":         "authorization.k8s.io",
	"EventsV1":                "events.k8s.io",
	"RbacV1":                  "rbac.authorization.k8s.io",
}

// verbOf maps a typed or dynamic client method to the RBAC verb it needs.
var verbOf = map[string]string{
	"Get": "get", "List": "list", "Watch": "watch", "Create": "create", "Update": "update",
	"UpdateStatus": "update", "Patch": "patch", "Apply": "patch", "ApplyStatus": "patch",
	"Delete": "delete", "DeleteCollection": "deletecollection", "Evict": "create", "EvictV1": "create",
}

// dynamicResources are the package-level GroupVersionResources the code
// hands to the dynamic client, by name.
var dynamicResources = map[string]request{
	"CNPGClusters":     {Group: kube.CNPGClusters.Group, Resource: kube.CNPGClusters.Resource},
	"NodeMaintenances": {Group: actors.NodeMaintenances.Group, Resource: actors.NodeMaintenances.Resource},
}

// sinks are client values handed to client-go code that makes requests
// with them: the verbs it uses.
var sinks = map[string][]string{
	// record.Broadcaster's sink writes a new Event with Create and a
	// repeated one with Patch (a Patch that finds none falls back to Create).
	"EventSinkImpl": {"create", "patch"},
}

// lockSinks are client-go's resource locks, handed a group client
// (Client: kc.CoordinationV1()) by leader election: what they lock and
// the verbs they use (read the record, create it the first time, take,
// renew and release it).
var lockSinks = map[string]request{
	"LeaseLock": {Group: "coordination.k8s.io", Resource: "leases"},
}

var groupAccessor = regexp.MustCompile(`^[A-Z][A-Za-z]*V[0-9]+((alpha|beta)[0-9]+)?$`)

// scanner finds the client-go requests of one file.
type scanner struct {
	fset  *token.FileSet
	calls []call
	errs  []string
}

// resourceOf returns the group/resource an expression's client value is
// for: X.CoreV1().Pods(ns), X.PolicyV1().Evictions(ns), X.Resource(GVR),
// X.Resource(GVR).Namespace(ns), or a variable bound to one of them.
func (s *scanner) resourceOf(e ast.Expr, bound map[string]request) (request, bool) {
	switch e := e.(type) {
	case *ast.Ident:
		r, ok := bound[e.Name]
		return r, ok
	case *ast.CallExpr:
		sel, ok := e.Fun.(*ast.SelectorExpr)
		if !ok {
			return request{}, false
		}
		if inner, ok := sel.X.(*ast.CallExpr); ok {
			if gsel, ok := inner.Fun.(*ast.SelectorExpr); ok && groupAccessor.MatchString(gsel.Sel.Name) && len(inner.Args) == 0 {
				group, known := groupOf[gsel.Sel.Name]
				if !known {
					s.errs = append(s.errs, fmt.Sprintf("%s: client group %s() is not in groupOf", s.fset.Position(e.Pos()), gsel.Sel.Name))
				}
				res := strings.ToLower(sel.Sel.Name)
				if sel.Sel.Name == "Evictions" {
					// The Eviction API is the pods/eviction subresource of
					// the core group, whichever client group calls it.
					group, res = "", "pods/eviction"
				}
				return request{Group: group, Resource: res}, true
			}
		}
		if sel.Sel.Name == "Resource" && len(e.Args) == 1 {
			name := ""
			switch a := e.Args[0].(type) {
			case *ast.Ident:
				name = a.Name
			case *ast.SelectorExpr:
				name = a.Sel.Name
			}
			r, ok := dynamicResources[name]
			if !ok {
				s.errs = append(s.errs, fmt.Sprintf("%s: dynamic client resource %s is not in dynamicResources", s.fset.Position(e.Pos()), name))
			}
			return r, true
		}
		if sel.Sel.Name == "Namespace" {
			return s.resourceOf(sel.X, bound)
		}
	}
	return request{}, false
}

func (s *scanner) file(f *ast.File) {
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		s.body(fn.Body)
	}
}

// body records every request in one function (closures included) and
// every client value that leaves it some other way.
func (s *scanner) body(b *ast.BlockStmt) {
	bound := map[string]request{}
	used := map[ast.Expr]bool{}
	ast.Inspect(b, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for i, rhs := range n.Rhs {
				if r, ok := s.resourceOf(rhs, bound); ok && i < len(n.Lhs) {
					if id, ok := n.Lhs[i].(*ast.Ident); ok {
						bound[id.Name] = r
						used[rhs] = true
					}
				}
			}
		case *ast.CompositeLit:
			name := ""
			switch t := n.Type.(type) {
			case *ast.SelectorExpr:
				name = t.Sel.Name
			case *ast.Ident:
				name = t.Name
			}
			if lock, ok := lockSinks[name]; ok {
				for _, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Client" {
							for _, v := range []string{"get", "create", "update"} {
								s.add(lock, v, kv.Value.Pos())
							}
						}
					}
				}
			}
			if verbs, ok := sinks[name]; ok {
				for _, el := range n.Elts {
					kv, ok := el.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					if r, ok := s.resourceOf(kv.Value, bound); ok {
						used[kv.Value] = true
						for _, v := range verbs {
							s.add(r, v, kv.Value.Pos())
						}
					}
				}
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			r, ok := s.resourceOf(sel.X, bound)
			if !ok {
				return true
			}
			if sel.Sel.Name == "Namespace" {
				used[sel.X] = true
				return true
			}
			if sel.Sel.Name == "GetLogs" && r.Group == "" && r.Resource == "pods" {
				// A pod's log is the pods/log subresource, read with get.
				used[sel.X] = true
				s.add(request{Group: "", Resource: "pods/log"}, "get", n.Pos())
				return true
			}
			verb, known := verbOf[sel.Sel.Name]
			if !known {
				s.errs = append(s.errs, fmt.Sprintf("%s: %s.%s: method not in verbOf", s.fset.Position(n.Pos()), r.Resource, sel.Sel.Name))
				return true
			}
			used[sel.X] = true
			s.add(r, verb, n.Pos())
		}
		return true
	})
	// A client value that is neither called nor bound goes somewhere the
	// scan cannot follow: a request made there would go unchecked.
	ast.Inspect(b, func(n ast.Node) bool {
		e, ok := n.(ast.Expr)
		if !ok || used[e] {
			return true
		}
		if c, ok := e.(*ast.CallExpr); ok {
			if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Namespace" {
				return true
			}
			if r, ok := s.resourceOf(c, map[string]request{}); ok {
				s.errs = append(s.errs, fmt.Sprintf("%s: a client of %s is passed on, not called: the scan cannot see its requests", s.fset.Position(c.Pos()), r.Resource))
			}
		}
		return true
	})
}

func (s *scanner) add(r request, verb string, pos token.Pos) {
	r.Verb = verb
	p := s.fset.Position(pos)
	s.calls = append(s.calls, call{request: r, At: fmt.Sprintf("%s:%d", p.Filename, p.Line)})
}

// scanModule reads every non-test Go file of the module but skipDirs.
func scanModule(t *testing.T) *scanner {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	s := &scanner{fset: token.NewFileSet()}
	files := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if _, skip := skipDirs[rel]; skip || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(s.fset, rel, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		s.file(f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("scanned %d Go files under %s: not the module", files, root)
	}
	return s
}

// TestRulesAllowEveryCall: every API request the production code makes
// has a rule (or is granted to everyone), and every verb of every rule is
// used by some request: no more, no less.
func TestRulesAllowEveryCall(t *testing.T) {
	s := scanModule(t)
	for _, e := range s.errs {
		t.Error(e)
	}
	if len(s.calls) < 20 {
		t.Fatalf("found %d API calls; the scan is broken", len(s.calls))
	}
	usedVerbs := map[request]bool{}
	for _, c := range s.calls {
		usedVerbs[c.request] = true
		if _, ok := rbac.Lookup(rbac.Rules, c.Group, c.Resource, c.Verb); ok {
			continue
		}
		if _, ok := rbac.Lookup(rbac.Granted, c.Group, c.Resource, c.Verb); ok {
			continue
		}
		t.Errorf("%s: %s: no rule in kube/rbac.Rules allows it; add one (and go test ./kube/rbac -run TestShippedManifests -update)", c.At, c.request)
	}
	for _, rules := range [][]rbac.Rule{rbac.Rules, rbac.Granted} {
		for _, r := range rules {
			for _, v := range r.Verbs {
				if !usedVerbs[request{Group: r.Group, Resource: r.Resource, Verb: v}] {
					t.Errorf("rule %s: no call in the code makes %s: drop the verb", r, v)
				}
			}
		}
	}
	var seen []string
	for r := range usedVerbs {
		seen = append(seen, r.String())
	}
	sort.Strings(seen)
	t.Logf("%d calls, %d distinct requests:\n%s", len(s.calls), len(seen), strings.Join(seen, "\n"))
}

// TestScannerFindsCalls: the scan sees each way the code reaches the API
// (a chain, a bound client, a dynamic resource, an Event sink, a
// leader election's Lease lock) and flags
// what it cannot follow.
func TestScannerFindsCalls(t *testing.T) {
	src := `package x
func f() {
	kc.CoreV1().Secrets(ns).Get(ctx, "a", opts)
	leases := kc.CoordinationV1().Leases(ns)
	leases.Update(ctx, l, opts)
	kc.PolicyV1().Evictions(ns).Evict(ctx, ev)
	dc.Resource(CNPGClusters).Namespace(ns).List(ctx, opts)
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kc.CoreV1().Events("")})
	lock := &resourcelock.LeaseLock{LeaseMeta: meta, Client: kc.CoordinationV1()}
	use(kc.AppsV1().Deployments(ns))
	kc.StorageV1().StorageClasses().List(ctx, opts)
	kc.CoreV1().Pods(ns).GetLogs(name, o)
	kc.CoreV1().Pods(ns).Bind(ctx, b, opts)
}`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := &scanner{fset: fset}
	s.file(f)
	var got []string
	for _, c := range s.calls {
		got = append(got, c.request.String())
	}
	want := []string{`get secrets (group "")`, `update leases (group "coordination.k8s.io")`, `create pods/eviction (group "")`,
		`list clusters (group "postgresql.cnpg.io")`, `create events (group "")`, `patch events (group "")`,
		`get leases (group "coordination.k8s.io")`, `create leases (group "coordination.k8s.io")`, `update leases (group "coordination.k8s.io")`, `list storageclasses (group "")`, `get pods/log (group "")`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	wantErrs := []string{"StorageV1() is not in groupOf", "pods.Bind: method not in verbOf", "a client of deployments is passed on"}
	for _, w := range wantErrs {
		if !slices.ContainsFunc(s.errs, func(e string) bool { return strings.Contains(e, w) }) {
			t.Errorf("no scan error %q in %q", w, s.errs)
		}
	}
	// A request the rules do not allow is what TestRulesAllowEveryCall
	// reports.
	if _, ok := rbac.Lookup(rbac.Rules, "", "secrets", "get"); ok {
		t.Error("the rules allow reading secrets")
	}
}
