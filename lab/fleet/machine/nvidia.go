package machine

import (
	_ "embed"
	"fmt"
	"strings"
	"time"
)

// nvsmiTemplate is a real `nvidia-smi -q -x` capture (v13 DTD, driver
// 595.58.03; the shared fixture nvidia-smi-q-x_telegraf_rtx-3080_v13.xml,
// MIT, from influxdata/telegraf). The lab keeps its element names and
// structure and replaces the values that describe an HGX GPU.
//
//go:embed nvsmi-template.xml
var nvsmiTemplate string

type gpuModel struct {
	name, deviceID, subsystem, vbios, boardPart, gpuPart string
	memMiB, reservedMiB                                  int
	power                                                string
}

var gpuModels = map[string]gpuModel{
	"H100": {name: "NVIDIA H100 80GB HBM3", deviceID: "233010DE", subsystem: "16C110DE", vbios: "96.00.99.00.01",
		boardPart: "692-2G520-0200-000", gpuPart: "2330-885-A1", memMiB: 81559, reservedMiB: 551, power: "700.00 W"},
	"H200": {name: "NVIDIA H200", deviceID: "233510DE", subsystem: "18B010DE", vbios: "96.00.A5.00.03",
		boardPart: "695-2G520-0280-001", gpuPart: "2335-895-A1", memMiB: 143771, reservedMiB: 663, power: "700.00 W"},
}

// setElem replaces the text of the first <tag> element after the first
// <within> (or from the start when within is empty).
func setElem(doc, within, tag, value string) string {
	start := 0
	if within != "" {
		i := strings.Index(doc, "<"+within+">")
		if i < 0 {
			return doc
		}
		start = i
	}
	open := "<" + tag + ">"
	i := strings.Index(doc[start:], open)
	if i < 0 {
		return doc
	}
	i += start + len(open)
	j := strings.Index(doc[i:], "</"+tag+">")
	if j < 0 {
		return doc
	}
	return doc[:i] + value + doc[i+j:]
}

// NvidiaSmiXML renders `nvidia-smi -q -x` for the visible GPUs.
func NvidiaSmiXML(s *State, now time.Time) string {
	head, rest, _ := strings.Cut(nvsmiTemplate, "\t<gpu id=")
	gpuBlock := "\t<gpu id=" + rest
	end := strings.Index(gpuBlock, "\t</gpu>\n")
	tail := gpuBlock[end+len("\t</gpu>\n"):]
	gpuBlock = gpuBlock[:end+len("\t</gpu>\n")]

	head = setElem(head, "", "timestamp", now.UTC().Format("Mon Jan _2 15:04:05 2006"))
	head = setElem(head, "", "driver_version", s.DriverVersion)
	head = setElem(head, "", "cuda_version", s.CUDAVersion)
	head = setElem(head, "", "attached_gpus", fmt.Sprint(s.GPUsVisible))

	m, ok := gpuModels[s.GPUModel]
	if !ok {
		m = gpuModels["H100"]
	}
	var b strings.Builder
	b.WriteString(head)
	for i := 0; i < s.GPUsVisible && i < len(s.GPUs); i++ {
		g := s.GPUs[i]
		blk := gpuBlock
		_, bus, _ := strings.Cut(g.BusID, ":")
		busHex, _, _ := strings.Cut(bus, ":")
		blk = strings.Replace(blk, `<gpu id="00000000:0C:00.0">`, `<gpu id="`+g.BusID+`">`, 1)
		for _, kv := range [][3]string{
			{"", "product_name", m.name},
			{"", "product_brand", "NVIDIA"},
			{"", "product_architecture", "Hopper"},
			{"", "display_attached", "No"},
			{"", "persistence_mode", "Enabled"},
			{"", "addressing_mode", "None"},
			{"mig_mode", "current_mig", "Disabled"},
			{"mig_mode", "pending_mig", "Disabled"},
			{"", "serial", g.Serial},
			{"", "uuid", g.UUID},
			{"", "pdi", "0x" + idFrom(16, "pdi", g.UUID)},
			{"", "minor_number", fmt.Sprint(g.Index)},
			{"", "vbios_version", m.vbios},
			{"", "multigpu_board", "No"},
			{"", "board_id", fmt.Sprintf("0x%s00", strings.ToLower(busHex))},
			{"", "board_part_number", m.boardPart},
			{"", "gpu_part_number", m.gpuPart},
			{"platformInfo", "module_id", fmt.Sprint(g.Module)},
			{"pci", "pci_bus", busHex},
			{"pci", "pci_device", "00"},
			{"pci", "pci_domain", "0000"},
			{"pci", "pci_device_id", m.deviceID},
			{"pci", "pci_bus_id", g.BusID},
			{"pci", "pci_sub_system_id", m.subsystem},
			{"pci_gpu_link_info", "max_link_gen", "5"},
			{"pci_gpu_link_info", "current_link_gen", "5"},
			{"fb_memory_usage", "total", fmt.Sprintf("%d MiB", m.memMiB)},
			{"fb_memory_usage", "reserved", fmt.Sprintf("%d MiB", m.reservedMiB)},
			{"fb_memory_usage", "used", "1 MiB"},
			{"fb_memory_usage", "free", fmt.Sprintf("%d MiB", m.memMiB-m.reservedMiB-1)},
			{"", "gpu_util", "0 %"},
			{"", "fan_speed", "N/A"},
			{"", "performance_state", "P0"},
			{"ecc_mode", "current_ecc", "Enabled"},
			{"ecc_mode", "pending_ecc", "Enabled"},
			{"fabric", "state", "Completed"},
			{"fabric", "status", "Success"},
			{"fabric", "cliqueId", "0"},
			{"fabric", "clusterUuid", "00000000-0000-0000-0000-000000000000"},
			{"gpu_power_readings", "current_power_limit", m.power},
			{"gpu_power_readings", "default_power_limit", m.power},
			{"gpu_power_readings", "max_power_limit", m.power},
		} {
			blk = setElem(blk, kv[0], kv[1], kv[2])
		}
		if s.Services["nvidia-fabricmanager.service"] != nil && s.Services["nvidia-fabricmanager.service"].ActiveState != "active" {
			blk = setElem(blk, "fabric", "state", "In Progress")
			blk = setElem(blk, "fabric", "status", "N/A")
		}
		b.WriteString(blk)
	}
	b.WriteString(tail)
	return b.String()
}

// NvidiaSmiList renders `nvidia-smi -L`.
func NvidiaSmiList(s *State) string {
	m, ok := gpuModels[s.GPUModel]
	if !ok {
		m = gpuModels["H100"]
	}
	var b strings.Builder
	for i := 0; i < s.GPUsVisible && i < len(s.GPUs); i++ {
		fmt.Fprintf(&b, "GPU %d: %s (UUID: %s)\n", i, m.name, s.GPUs[i].UUID)
	}
	return b.String()
}

// GPUName is the product name of the host's GPUs.
func GPUName(s *State) string {
	m, ok := gpuModels[s.GPUModel]
	if !ok {
		m = gpuModels["H100"]
	}
	return m.name
}

// GPUMemoryMiB is the memory of one GPU.
func GPUMemoryMiB(s *State) int {
	m, ok := gpuModels[s.GPUModel]
	if !ok {
		m = gpuModels["H100"]
	}
	return m.memMiB
}

// NvidiaSmiNoDriver is what nvidia-smi prints (exit 9) without a driver.
const NvidiaSmiNoDriver = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n\n"
