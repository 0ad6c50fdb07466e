package tools

// Builtin returns every tool mcp-patch offers.
func Builtin() *Registry {
	r := &Registry{}
	r.Add(builtin()...)
	return r
}

func builtin() []Tool {
	return []Tool{
		ReadIntent(), RecordLesson(), RunVerify(),
		PlanRound(), RoundStatus(), RecordDecision(), CloseRound(), ShowPlan(), SignPlan(), ApproveWindow(), ReplanNode(),
		InspectNode(), SimulateUpgrade(), DownloadUpdates(), SnapshotNode(), VerifyNode(), FleetCheck(), RecordInspection(), RecordSimulation(), RecordVerification(),
		DrainNode(), InstallUpdates(), TrialBoot(), UncordonNode(), GPUAcceptance(), PromoteKernel(), CheckGate(), CloseWindow(), RecordFleetCheck(),
		Autoremove(), FallbackDrill(), RollbackNode(),
	}
}
