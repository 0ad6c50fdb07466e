package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// ApplyFile server-side applies every object in a YAML or JSON file (several
// documents allowed) and returns them as applied. CustomResourceDefinitions
// are waited for until they are Established and served, so objects of the
// new kinds can follow, in the same file or later.
//
// Server-side apply, unlike kubectl's client-side apply, stores no copy of
// the object in an annotation, so CRDs larger than the 256 KiB annotation
// limit (CloudNativePG's Cluster CRD is ~470 KB) apply cleanly.
func (c *Cluster) ApplyFile(ctx context.Context, path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("apply %s: %w", path, err)
	}
	objs, err := decodeObjects(data)
	if err != nil {
		return nil, fmt.Errorf("apply %s: %w", path, err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.client.Discovery()))
	var applied []*unstructured.Unstructured
	for _, obj := range objs {
		out, err := c.applyObject(ctx, mapper, obj)
		if err != nil {
			return applied, fmt.Errorf("apply %s: %w", path, err)
		}
		applied = append(applied, out)
		if out.GroupVersionKind().GroupKind() == (schema.GroupKind{Group: crdResource.Group, Kind: "CustomResourceDefinition"}) {
			if err := c.waitCRDServed(ctx, out.GetName()); err != nil {
				return applied, fmt.Errorf("apply %s: %w", path, err)
			}
			mapper.Reset()
		}
	}
	return applied, nil
}

// InstallCRDFile applies a file that must hold at least one
// CustomResourceDefinition and returns the CRD names once they are served.
func (c *Cluster) InstallCRDFile(ctx context.Context, path string) ([]string, error) {
	objs, err := c.ApplyFile(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("install CRDs: %w", err)
	}
	var names []string
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			names = append(names, o.GetName())
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("install CRDs: %s holds no CustomResourceDefinition", path)
	}
	return names, nil
}

func (c *Cluster) applyObject(ctx context.Context, mapper meta.RESTMapper, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	gvk := obj.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	body, err := json.Marshal(obj.Object)
	if err != nil {
		return nil, fmt.Errorf("%s %s: encode: %w", gvk.Kind, obj.GetName(), err)
	}
	res := c.dynamic.Resource(mapping.Resource)
	force := true
	opts := metav1.PatchOptions{FieldManager: fieldManager, Force: &force}
	var out *unstructured.Unstructured
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := obj.GetNamespace()
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		out, err = res.Namespace(ns).Patch(ctx, obj.GetName(), types.ApplyPatchType, body, opts)
	} else {
		out, err = res.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	return out, nil
}

// waitCRDServed waits until the CRD is Established and its resource is in
// discovery.
func (c *Cluster) waitCRDServed(ctx context.Context, name string) error {
	return c.poll(ctx, "CRD "+name+" established", func(ctx context.Context) (bool, error) {
		crd, err := c.dynamic.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		established := false
		for _, raw := range conds {
			cond, _ := raw.(map[string]any)
			if cond["type"] == "Established" && cond["status"] == "True" {
				established = true
			}
		}
		if !established {
			return false, nil
		}
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		for _, raw := range versions {
			v, _ := raw.(map[string]any)
			if served, _ := v["served"].(bool); !served {
				continue
			}
			list, err := c.client.Discovery().ServerResourcesForGroupVersion(group + "/" + fmt.Sprint(v["name"]))
			if err != nil {
				return false, nil
			}
			found := false
			for _, r := range list.APIResources {
				found = found || r.Name == plural
			}
			if !found {
				return false, nil
			}
		}
		return true, nil
	})
}

// decodeObjects splits YAML or JSON documents into objects, skipping empty
// documents.
func decodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for i := 0; ; i++ {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(m) == 0 {
			continue
		}
		obj := &unstructured.Unstructured{Object: m}
		if obj.GetKind() == "" || obj.GetAPIVersion() == "" || obj.GetName() == "" {
			return nil, fmt.Errorf("document %d: apiVersion, kind and metadata.name are required", i)
		}
		objs = append(objs, obj)
	}
	if len(objs) == 0 {
		return nil, errors.New("no objects")
	}
	return objs, nil
}
