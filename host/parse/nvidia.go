package parse

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// NvidiaSMI is the part of `nvidia-smi -q -x` the GPU check reads.
type NvidiaSMI struct {
	DriverVersion string `json:"driver_version"`
	CUDAVersion   string `json:"cuda_version"`
	// AttachedGPUs is nvidia-smi's own count; GPUs may list fewer (seen on
	// MIG systems with device filtering).
	AttachedGPUs int   `json:"attached_gpus"`
	GPUs         []GPU `json:"gpus"`
}

// GPU is one <gpu> element.
type GPU struct {
	PCIBusID    string `json:"pci_bus_id"`
	UUID        string `json:"uuid"`
	Name        string `json:"name"`
	Serial      string `json:"serial,omitempty"`
	MinorNumber string `json:"minor_number,omitempty"`
	// MIGMode is the current MIG mode ("Enabled", "Disabled", "N/A").
	MIGMode string `json:"mig_mode,omitempty"`
	// ECCMode is the current ECC mode.
	ECCMode string `json:"ecc_mode,omitempty"`
	// VolatileUncorrectable sums the volatile uncorrectable ECC counters
	// nvidia-smi reports (DRAM, SRAM, or the older double_bit total); -1
	// when none is a number.
	VolatileUncorrectable int64 `json:"volatile_uncorrectable_ecc"`
	// AggregateUncorrectable is the same over the GPU's lifetime.
	AggregateUncorrectable int64 `json:"aggregate_uncorrectable_ecc"`
	// RetiredPagesPending is "Yes" when a page retirement waits for a
	// reset or reboot.
	RetiredPagesPending string `json:"retired_pages_pending,omitempty"`
	// RemappedRowsPending / RemappedRowsFailure come from <remapped_rows>
	// (Ampere and later).
	RemappedRowsPending string `json:"remapped_rows_pending,omitempty"`
	RemappedRowsFailure string `json:"remapped_rows_failure,omitempty"`
	// FabricState / FabricStatus are "Completed"/"Success" on a healthy
	// NVSwitch system, "N/A" elsewhere.
	FabricState  string `json:"fabric_state,omitempty"`
	FabricStatus string `json:"fabric_status,omitempty"`
	// Problems lists what looks unhealthy, in words.
	Problems []string `json:"problems"`
}

type xmlECCCounts struct {
	DRAMUncorrectable       string `xml:"dram_uncorrectable"`
	SRAMUncorrectable       string `xml:"sram_uncorrectable"`
	SRAMUncorrectableParity string `xml:"sram_uncorrectable_parity"`
	SRAMUncorrectableSECDED string `xml:"sram_uncorrectable_secded"`
	DoubleBitTotal          string `xml:"double_bit>total"`
}

type xmlGPU struct {
	ID          string       `xml:"id,attr"`
	ProductName string       `xml:"product_name"`
	UUID        string       `xml:"uuid"`
	Serial      string       `xml:"serial"`
	Minor       string       `xml:"minor_number"`
	PCIBusID    string       `xml:"pci>pci_bus_id"`
	MIG         string       `xml:"mig_mode>current_mig"`
	ECC         string       `xml:"ecc_mode>current_ecc"`
	Volatile    xmlECCCounts `xml:"ecc_errors>volatile"`
	Aggregate   xmlECCCounts `xml:"ecc_errors>aggregate"`
	Retired     struct {
		Pending string `xml:"pending_retirement"`
	} `xml:"retired_pages"`
	Remapped struct {
		Pending string `xml:"remapped_row_pending"`
		Failure string `xml:"remapped_row_failure"`
	} `xml:"remapped_rows"`
	Fabric struct {
		State  string `xml:"state"`
		Status string `xml:"status"`
	} `xml:"fabric"`
}

type xmlSMILog struct {
	XMLName       xml.Name `xml:"nvidia_smi_log"`
	DriverVersion string   `xml:"driver_version"`
	CUDAVersion   string   `xml:"cuda_version"`
	AttachedGPUs  string   `xml:"attached_gpus"`
	GPUs          []xmlGPU `xml:"gpu"`
}

// ParseNvidiaSMIXML reads `nvidia-smi -q -x` (DTD v10 to v13). The DOCTYPE
// is not fetched. It fails on XML that does not parse or has no
// <nvidia_smi_log> root.
func ParseNvidiaSMIXML(data []byte) (NvidiaSMI, error) {
	var log xmlSMILog
	d := xml.NewDecoder(bytes.NewReader(data))
	d.Strict = true
	d.Entity = xml.HTMLEntity
	if err := d.Decode(&log); err != nil {
		return NvidiaSMI{}, fmt.Errorf("nvidia-smi XML: %w", err)
	}
	out := NvidiaSMI{
		DriverVersion: strings.TrimSpace(log.DriverVersion),
		CUDAVersion:   strings.TrimSpace(log.CUDAVersion),
		AttachedGPUs:  atoi(strings.TrimSpace(log.AttachedGPUs)),
		GPUs:          []GPU{},
	}
	for _, g := range log.GPUs {
		gpu := GPU{
			PCIBusID:               strings.TrimSpace(firstNonEmpty(g.PCIBusID, g.ID)),
			UUID:                   strings.TrimSpace(g.UUID),
			Name:                   strings.TrimSpace(g.ProductName),
			Serial:                 strings.TrimSpace(g.Serial),
			MinorNumber:            strings.TrimSpace(g.Minor),
			MIGMode:                strings.TrimSpace(g.MIG),
			ECCMode:                strings.TrimSpace(g.ECC),
			VolatileUncorrectable:  g.Volatile.sum(),
			AggregateUncorrectable: g.Aggregate.sum(),
			RetiredPagesPending:    strings.TrimSpace(g.Retired.Pending),
			RemappedRowsPending:    strings.TrimSpace(g.Remapped.Pending),
			RemappedRowsFailure:    strings.TrimSpace(g.Remapped.Failure),
			FabricState:            strings.TrimSpace(g.Fabric.State),
			FabricStatus:           strings.TrimSpace(g.Fabric.Status),
			Problems:               []string{},
		}
		if gpu.VolatileUncorrectable > 0 {
			gpu.Problems = append(gpu.Problems, fmt.Sprintf("%d volatile uncorrectable ECC errors", gpu.VolatileUncorrectable))
		}
		if strings.EqualFold(gpu.RetiredPagesPending, "Yes") {
			gpu.Problems = append(gpu.Problems, "page retirement pending (needs a GPU reset)")
		}
		if strings.EqualFold(gpu.RemappedRowsPending, "Yes") {
			gpu.Problems = append(gpu.Problems, "row remapping pending (needs a GPU reset)")
		}
		if strings.EqualFold(gpu.RemappedRowsFailure, "Yes") {
			gpu.Problems = append(gpu.Problems, "row remapping failed")
		}
		if gpu.FabricState != "" && gpu.FabricState != "N/A" && gpu.FabricState != "Completed" {
			gpu.Problems = append(gpu.Problems, "fabric state "+gpu.FabricState)
		}
		if gpu.FabricStatus != "" && gpu.FabricStatus != "N/A" && gpu.FabricStatus != "Success" {
			gpu.Problems = append(gpu.Problems, "fabric status "+gpu.FabricStatus)
		}
		out.GPUs = append(out.GPUs, gpu)
	}
	return out, nil
}

func (c xmlECCCounts) sum() int64 {
	var total int64
	found := false
	for _, v := range []string{c.DRAMUncorrectable, c.SRAMUncorrectable, c.SRAMUncorrectableParity, c.SRAMUncorrectableSECDED, c.DoubleBitTotal} {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 0 {
			continue
		}
		found = true
		if total > (1<<62) || n > (1<<62) {
			return 1 << 62
		}
		total += n
	}
	if !found {
		return -1
	}
	return total
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if strings.TrimSpace(v) != "" {
			return v
		}
	}
	return ""
}

var nvrmVersion = regexp.MustCompile(`NVRM version:.*?\s(\d+\.\d+(?:\.\d+)?)\s`)

// ErrNoNvidiaVersion is returned when /proc/driver/nvidia/version has no
// NVRM version line.
var ErrNoNvidiaVersion = errors.New("no NVRM version line")

// ParseNvidiaProcVersion reads the driver version from
// /proc/driver/nvidia/version, e.g. "NVRM version: NVIDIA UNIX x86_64
// Kernel Module  535.161.08  Release Build ..." or the open kernel module
// wording.
func ParseNvidiaProcVersion(s string) (string, error) {
	m := nvrmVersion.FindStringSubmatch(s + " ")
	if m == nil {
		return "", ErrNoNvidiaVersion
	}
	return m[1], nil
}
