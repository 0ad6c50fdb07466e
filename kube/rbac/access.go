package rbac

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Missing is one verb of a rule the caller is not allowed.
type Missing struct {
	Rule Rule
	Verb string
	// Namespace the review asked about; "" for every namespace.
	Namespace string
	// Name is the one object the rule is limited to; "" for any.
	Name string
	// Grant is the rule that grants it and where the shipped manifests
	// hold it.
	Grant string
}

// Check asks the API server, with one SelfSubjectAccessReview per verb,
// whether the caller may make each request of rules (granted where o
// says), and returns those it may not. It changes nothing: an access
// review is answered, never stored.
func Check(ctx context.Context, kc kubernetes.Interface, rules []Rule, o Options) ([]Missing, error) {
	o = o.WithDefaults()
	var missing []Missing
	for _, r := range rules {
		res, sub, _ := strings.Cut(r.Resource, "/")
		ns := o.Namespace(r.Scope)
		for _, v := range r.Verbs {
			review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: v, Group: r.Group,
					Resource: res, Subresource: sub, Name: o.resourceName(r.ResourceName)}}}
			got, err := kc.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
			if err != nil {
				return missing, fmt.Errorf("review access to %s %s: %w", v, r.Resource, err)
			}
			if !got.Status.Allowed {
				one := r
				one.Verbs = []string{v}
				missing = append(missing, Missing{Rule: r, Verb: v, Namespace: ns, Name: o.resourceName(r.ResourceName), Grant: fmt.Sprintf("%s (%s)", one.text(o), o.Where(r.Scope))})
			}
		}
	}
	return missing, nil
}

// forbidden is the authorizer's message: `User "u" cannot VERB resource
// "RES" in API group "G"`.
var forbidden = regexp.MustCompile(`cannot (\w+) resource "([^"]+)" in API group "([^"]*)"`)

// ErrForbidden marks an API request the caller's roles do not allow.
var ErrForbidden = errors.New("missing Kubernetes permission")

// Explain returns err, when the API server refused it as forbidden, with
// the rule that grants the request and where the shipped manifests hold
// it; any other error unchanged.
func Explain(err error, o Options) error {
	if err == nil || !apierrors.IsForbidden(err) {
		return err
	}
	m := forbidden.FindStringSubmatch(err.Error())
	if m == nil {
		return fmt.Errorf("%w (%w)", err, ErrForbidden)
	}
	verb, resource, group := m[1], m[2], m[3]
	r, ok := Lookup(Rules, group, resource, verb)
	if !ok {
		return fmt.Errorf("%w (%w: %s %s in API group %q, which no rule of kube/rbac grants)", err, ErrForbidden, verb, resource, group)
	}
	one := r
	one.Verbs = []string{verb}
	return fmt.Errorf("%w (%w: grant %s in %s, deploy/kubernetes/rbac.yaml)", err, ErrForbidden, one.text(o), o.Where(r.Scope))
}
