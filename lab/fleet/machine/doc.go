// Package machine is the model of one emulated Ubuntu GPU server of the lab
// fleet: its persisted state (packages, holds, kernels, GPUs, services,
// bonds, RDMA ports, sysctls, faults), the directory laid out like the
// host's filesystem where the host-side scripts read and write files, and
// the pieces of real system behaviour the emulation needs: GRUB's
// environment block and menu (generation as update-grub writes it, entry
// selection as GRUB's generated 00_header does it), apt's planning and its
// output format, dpkg version ordering, and `nvidia-smi -q -x` XML.
//
// State lives in one directory per host (see Layout) and is shared between
// the lab process and the emulated commands, which are separate processes:
// every read and write goes through Open/View/Update under an flock.
//
// It owns only files under a host directory it is given. It must not touch
// anything of the machine it runs on, and production packages must not
// import it.
package machine
