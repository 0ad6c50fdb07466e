// Package maintainers is the lab's stand-in for the other parties that
// maintain a GPU node, on the lab's real API server: NVIDIA's maintenance
// operator (NodeMaintenance objects served one at a time per node, its
// Ready condition, its cordon and the annotations it leaves), kured's
// reboot lock on its DaemonSet, the GPU Operator's driver upgrade (its
// per-node state label and cordon) and a person's cordon. Install puts
// the real CRDs and objects in place (embedded under crd/, see
// crd/SOURCES.md); Operator plays the maintenance operator; the other
// functions are faults, each with its undo.
//
// The names it writes are its own constants taken from the upstream
// sources, not kube/actors': the stand-ins are an independent witness
// that the project's reader sees the real components as they are.
//
// It owns the objects it creates. The operator touches only
// NodeMaintenance objects and the nodes they name; a fault helper only
// the node, object or DaemonSet it is given, and undoes only what it did.
package maintainers
