//! kube-apiserver 1.33's feature gates: every name `--feature-gates` accepts, with the default,
//! lock and stage 1.33 gives it.
//!
//! kube-apiserver registers the union of several gate sets into one gate, and the facts below are
//! that union, read from the Kubernetes sources:
//!
//! - `pkg/features/kube_features.go` of kubernetes/kubernetes at commit
//!   `b0b89d3bd251db932ed5a7bef66039fb88acab64` (a 1.33 development commit whose newest spec is
//!   1.33): Kubernetes' own gates, including the ones relisted from the generic apiserver,
//!   apiextensions-apiserver, controller-manager (`CloudControllerManagerWebhook`) and zpages.
//! - `test/compatibility_lifecycle/reference/versioned_feature_list.yaml` of kubernetes/kubernetes
//!   at commit `002acc1a391120e71e0b789198f15b8d9e8b206a` (early 1.34 development), to catch what
//!   changed between that 1.33 development commit and the 1.33.0 release (no spec up to 1.33
//!   differs; `WatchList` gained its 1.33 spec there).
//! - The staging modules at their `v0.33.0` tags, which are exactly Kubernetes 1.33.0:
//!   `pkg/features/kube_features.go` of k8s.io/apiserver (`9529108a5dff5a998bca0afd61510c9c0e34b2e3`)
//!   and of k8s.io/apiextensions-apiserver (`1b7ab0f38c5b874936fb6cea84d68632bdd5ee44`);
//!   `logs/api/v1/kube_features.go` (registered by `cmd/kube-apiserver/app/server.go`),
//!   `metrics/features/kube_features.go` (registered by the generic apiserver's
//!   `pkg/server/config.go`) and `zpages/features/kube_features.go` of k8s.io/component-base
//!   (`07e241d86c33abe730554350ae8c35bc2dbe9684`); `features/known_features.go` of k8s.io/client-go
//!   (`3aa3c77983ce87f8702329ea44d366cb16a04fd1`), whose gates `pkg/features` adds to kube's gate
//!   through its client adapter.
//!
//! A gate's 1.33 state is its last versioned spec whose version is at most 1.33; a gate whose first
//! spec is newer than 1.33 is left out. client-go's gates are unversioned, so their one spec is the
//! 1.33 state. Gates removed after 1.33 (`DevicePluginCDIDevices`, `ElasticIndexedJob`,
//! `PodDisruptionConditions`, `StatefulSetStartOrdinal`, `LegacySidecarContainers`) come from the
//! 1.33 development source above; that they were still in 1.33.0 and were removed in 1.34 was
//! checked against Gardener's per-release list of Kubernetes feature gates
//! (`pkg/utils/validation/features/featuregates.go` of gardener/gardener).
//!
//! Names are the gates' string values, which differ from the Go identifiers for two gates:
//! `CustomCPUCFSQuotaPeriod` (Go `CPUCFSQuotaPeriod`) and `RuntimeClassInImageCriApi` (Go
//! `RuntimeClassInImageCriAPI`).

/// A feature gate's maturity in 1.33.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    /// Alpha: off by default, turned on by `AllAlpha=true`.
    Alpha,
    /// Beta: turned on or off as a group by `AllBeta`.
    Beta,
    /// Generally available.
    Ga,
    /// Deprecated: kept for a while before removal.
    Deprecated,
}

/// One feature gate as kube-apiserver 1.33 knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Gate {
    /// Its name.
    pub(super) name: &'static str,
    /// Its default in 1.33.
    pub(super) default: bool,
    /// Whether 1.33 locks it to its default (LockToDefault: setting the other value is an error).
    pub(super) locked: bool,
    /// Its stage in 1.33.
    pub(super) stage: Stage,
}

/// Every feature gate kube-apiserver 1.33 accepts, sorted by name.
pub(super) const GATES: &[Gate] = &[
    Gate {
        name: "APIResponseCompression",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "APIServerIdentity",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "APIServerTracing",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "APIServingWithRoutine",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "AggregatedDiscoveryRemoveBetaType",
        default: true,
        locked: false,
        stage: Stage::Deprecated,
    },
    Gate {
        name: "AllowDNSOnlyNodeCSR",
        default: false,
        locked: false,
        stage: Stage::Deprecated,
    },
    Gate {
        name: "AllowInsecureKubeletCertificateSigningRequests",
        default: false,
        locked: false,
        stage: Stage::Deprecated,
    },
    Gate {
        name: "AllowOverwriteTerminationGracePeriodSeconds",
        default: false,
        locked: false,
        stage: Stage::Deprecated,
    },
    Gate {
        name: "AllowParsingUserUIDFromCertAuth",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "AllowServiceLBStatusOnNonLB",
        default: false,
        locked: true,
        stage: Stage::Deprecated,
    },
    Gate {
        name: "AllowUnsafeMalformedObjectDeletion",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "AnonymousAuthConfigurableEndpoints",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "AnyVolumeDataSource",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "AuthorizeNodeWithSelectors",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "AuthorizeWithSelectors",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "BtreeWatchCache",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "CBORServingAndStorage",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "CPUManagerPolicyAlphaOptions",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "CPUManagerPolicyBetaOptions",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "CPUManagerPolicyOptions",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "CRDValidationRatcheting",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "CSIMigrationPortworx",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "CSIVolumeHealth",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "ClientsAllowCBOR",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "ClientsPreferCBOR",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "CloudControllerManagerWebhook",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "ClusterTrustBundle",
        default: false,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "ClusterTrustBundleProjection",
        default: false,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "ComponentFlagz",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "ComponentSLIs",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "ComponentStatusz",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "ConcurrentWatchObjectDecode",
        default: false,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "ConsistentListFromCache",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "ContainerCheckpoint",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "ContainerStopSignals",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "ContextualLogging",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "CoordinatedLeaderElection",
        default: false,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "CronJobsScheduledAnnotation",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "CrossNamespaceVolumeDataSource",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "CustomCPUCFSQuotaPeriod",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "CustomResourceFieldSelectors",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "DRAAdminAccess",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "DRADeviceTaints",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "DRAPartitionableDevices",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "DRAPrioritizedList",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "DRAResourceClaimDeviceStatus",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "DeclarativeValidation",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "DeclarativeValidationTakeover",
        default: false,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "DeploymentReplicaSetTerminatingReplicas",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "DevicePluginCDIDevices",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "DisableAllocatorDualWrite",
        default: false,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "DisableCPUQuotaWithExclusiveCPUs",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "DisableNodeKubeProxyVersion",
        default: true,
        locked: false,
        stage: Stage::Deprecated,
    },
    Gate {
        name: "DynamicResourceAllocation",
        default: false,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "ElasticIndexedJob",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "EventedPLEG",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "ExecProbeTimeout",
        default: true,
        locked: false,
        stage: Stage::Ga,
    },
    Gate {
        name: "ExternalServiceAccountTokenSigner",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "GitRepoVolumeDriver",
        default: false,
        locked: false,
        stage: Stage::Deprecated,
    },
    Gate {
        name: "GracefulNodeShutdown",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "GracefulNodeShutdownBasedOnPodPriority",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "HPAConfigurableTolerance",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "HPAScaleToZero",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "HonorPVReclaimPolicy",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "ImageMaximumGCAge",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "ImageVolume",
        default: false,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "InOrderInformers",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "InPlacePodVerticalScaling",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "InPlacePodVerticalScalingAllocatedStatus",
        default: false,
        locked: false,
        stage: Stage::Deprecated,
    },
    Gate {
        name: "InPlacePodVerticalScalingExclusiveCPUs",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "InTreePluginPortworxUnregister",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "InformerResourceVersion",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "JobBackoffLimitPerIndex",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "JobManagedBy",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "JobPodReplacementPolicy",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "JobSuccessPolicy",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "KMSv1",
        default: false,
        locked: false,
        stage: Stage::Deprecated,
    },
    Gate {
        name: "KubeletCgroupDriverFromCRI",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "KubeletCrashLoopBackOffMax",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "KubeletEnsureSecretPulledImages",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "KubeletFineGrainedAuthz",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "KubeletInUserNamespace",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "KubeletPSI",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "KubeletPodResourcesDynamicResources",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "KubeletPodResourcesGet",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "KubeletRegistrationGetOnExistsOnly",
        default: false,
        locked: false,
        stage: Stage::Deprecated,
    },
    Gate {
        name: "KubeletSeparateDiskGC",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "KubeletServiceAccountTokenForCredentialProviders",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "KubeletTracing",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "LegacySidecarContainers",
        default: false,
        locked: false,
        stage: Stage::Deprecated,
    },
    Gate {
        name: "ListFromCacheSnapshot",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "LoadBalancerIPMode",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "LocalStorageCapacityIsolationFSQuotaMonitoring",
        default: false,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "LogarithmicScaleDown",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "LoggingAlphaOptions",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "LoggingBetaOptions",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "MatchLabelKeysInPodAffinity",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "MatchLabelKeysInPodTopologySpread",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "MaxUnavailableStatefulSet",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "MemoryManager",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "MemoryQoS",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "MultiCIDRServiceAllocator",
        default: true,
        locked: false,
        stage: Stage::Ga,
    },
    Gate {
        name: "MutableCSINodeAllocatableCount",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "MutatingAdmissionPolicy",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "NFTablesProxyMode",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "NodeInclusionPolicyInPodTopologySpread",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "NodeLogQuery",
        default: false,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "NodeSwap",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "OpenAPIEnums",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "OrderedNamespaceDeletion",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "PodAndContainerStatsFromCRI",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "PodDeletionCost",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "PodDisruptionConditions",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "PodIndexLabel",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "PodLevelResources",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "PodLifecycleSleepAction",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "PodLifecycleSleepActionAllowZero",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "PodLogsQuerySplitStreams",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "PodObservedGenerationTracking",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "PodReadyToStartContainersCondition",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "PodSchedulingReadiness",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "PodTopologyLabelsAdmission",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "PortForwardWebsockets",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "PreferSameTrafficDistribution",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "ProcMountType",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "QOSReserved",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "RecoverVolumeExpansionFailure",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "RecursiveReadOnlyMounts",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "ReduceDefaultCrashLoopBackOffDecay",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "RelaxedDNSSearchValidation",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "RelaxedEnvironmentVariableValidation",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "ReloadKubeletServerCertificateFile",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "RemoteRequestHeaderUID",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "ResilientWatchCacheInitialization",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "ResourceHealthStatus",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "RetryGenerateName",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "RotateKubeletServerCertificate",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "RuntimeClassInImageCriApi",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "SELinuxChangePolicy",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "SELinuxMount",
        default: false,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "SELinuxMountReadWriteOncePod",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "SchedulerAsyncPreemption",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "SchedulerPopFromBackoffQ",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "SchedulerQueueingHints",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "SeparateCacheWatchRPC",
        default: false,
        locked: false,
        stage: Stage::Deprecated,
    },
    Gate {
        name: "SeparateTaintEvictionController",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "ServiceAccountNodeAudienceRestriction",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "ServiceAccountTokenJTI",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "ServiceAccountTokenNodeBinding",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "ServiceAccountTokenNodeBindingValidation",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "ServiceAccountTokenPodNodeInfo",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "ServiceTrafficDistribution",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "SidecarContainers",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "SizeMemoryBackedVolumes",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "StatefulSetAutoDeletePVC",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "StatefulSetStartOrdinal",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "StorageCapacityScoring",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "StorageNamespaceIndex",
        default: true,
        locked: false,
        stage: Stage::Deprecated,
    },
    Gate {
        name: "StorageVersionAPI",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "StorageVersionHash",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "StorageVersionMigrator",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "StreamingCollectionEncodingToJSON",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "StreamingCollectionEncodingToProtobuf",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "StrictCostEnforcementForVAP",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "StrictCostEnforcementForWebhooks",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "StrictIPCIDRValidation",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "StructuredAuthenticationConfiguration",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "StructuredAuthorizationConfiguration",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "SupplementalGroupsPolicy",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "SystemdWatchdog",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "TopologyAwareHints",
        default: true,
        locked: true,
        stage: Stage::Ga,
    },
    Gate {
        name: "TopologyManagerPolicyAlphaOptions",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "TopologyManagerPolicyBetaOptions",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "TopologyManagerPolicyOptions",
        default: true,
        locked: false,
        stage: Stage::Ga,
    },
    Gate {
        name: "TranslateStreamCloseWebsocketRequests",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "UnauthenticatedHTTP2DOSMitigation",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "UnknownVersionInteroperabilityProxy",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "UserNamespacesPodSecurityStandards",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "UserNamespacesSupport",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "VolumeAttributesClass",
        default: false,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "WatchCacheInitializationPostStartHook",
        default: false,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "WatchFromStorageWithoutResourceVersion",
        default: false,
        locked: true,
        stage: Stage::Deprecated,
    },
    Gate {
        name: "WatchList",
        default: false,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "WatchListClient",
        default: false,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "WinDSR",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "WinOverlay",
        default: true,
        locked: false,
        stage: Stage::Beta,
    },
    Gate {
        name: "WindowsCPUAndMemoryAffinity",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "WindowsGracefulNodeShutdown",
        default: false,
        locked: false,
        stage: Stage::Alpha,
    },
    Gate {
        name: "WindowsHostNetwork",
        default: false,
        locked: false,
        stage: Stage::Deprecated,
    },
];

/// The key that sets every alpha gate not named on its own (`AllAlpha=true`).
pub(super) const ALL_ALPHA: &str = "AllAlpha";

/// The key that sets every beta gate not named on its own (`AllBeta=false`).
pub(super) const ALL_BETA: &str = "AllBeta";

/// `--feature-gates`: every name must be one of kube-apiserver 1.33's gates (or `AllAlpha`,
/// `AllBeta`), with kube's errors for unknown names, bad values and locked gates; konverge runs
/// each gate at its 1.33 default, so a setting that keeps it is taken and one that changes it
/// is refused.
pub(crate) fn check(entries: &[String]) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    for entry in entries.iter().filter(|e| !e.is_empty()) {
        let Some((name, value)) = entry.split_once('=') else {
            errors.push(format!("missing bool value for {entry}"));
            continue;
        };
        let (name, value) = (name.trim(), value.trim());
        let enable = match konverge_apimachinery::query::strconv_parse_bool(value) {
            Ok(enable) => enable,
            Err(error) => {
                errors.push(format!("invalid value of {name}={value}, err: {error}"));
                continue;
            }
        };
        let differs_at = |stage: Stage| {
            GATES
                .iter()
                .filter(|gate| gate.stage == stage && gate.default != enable)
                .map(|gate| gate.name)
                .collect::<Vec<_>>()
        };
        let changed = if name == ALL_ALPHA {
            differs_at(Stage::Alpha)
        } else if name == ALL_BETA {
            differs_at(Stage::Beta)
        } else {
            match GATES.binary_search_by(|gate| gate.name.cmp(name)) {
                Err(_) => {
                    errors.push(format!("unrecognized feature gate: {name}"));
                    continue;
                }
                Ok(at) => {
                    let gate = &GATES[at];
                    if gate.locked && gate.default != enable {
                        errors.push(format!(
                            "cannot set feature gate {name} to {enable}, feature is locked to {}",
                            gate.default
                        ));
                        continue;
                    }
                    if gate.default == enable {
                        Vec::new()
                    } else {
                        vec![gate.name]
                    }
                }
            }
        };
        if !changed.is_empty() {
            errors.push(format!(
                "--feature-gates {name}={value}: konverge runs every feature gate at its \
                 Kubernetes 1.33 default and cannot set {}",
                changed.join(", ")
            ));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn feature_gates_at_their_default_are_taken_and_others_refused_in_kubes_words() {
        assert!(
            GATES.windows(2).all(|w| w[0].name < w[1].name),
            "sorted for lookup"
        );
        assert_eq!(
            check(&strings(&[
                "MultiCIDRServiceAllocator=true",
                "AllAlpha=false",
                ""
            ])),
            Ok(())
        );
        assert_eq!(
            check(&strings(&["NoSuchGate=true"])),
            Err(strings(&["unrecognized feature gate: NoSuchGate"]))
        );
        assert_eq!(
            check(&strings(&["ComponentSLIs=false"])),
            Err(strings(&[
                "cannot set feature gate ComponentSLIs to false, feature is locked to true"
            ]))
        );
        assert_eq!(
            check(&strings(&["InPlacePodVerticalScaling"])),
            Err(strings(&[
                "missing bool value for InPlacePodVerticalScaling"
            ]))
        );
        assert_eq!(
            check(&strings(&["WatchList=maybe"])),
            Err(strings(&[
                "invalid value of WatchList=maybe, err: strconv.ParseBool: parsing \"maybe\": \
                 invalid syntax"
            ]))
        );
        let changed = check(&strings(&["WatchList=true"])).expect_err("refused");
        assert_eq!(
            changed,
            strings(&[
                "--feature-gates WatchList=true: konverge runs every feature gate at its \
                 Kubernetes 1.33 default and cannot set WatchList"
            ])
        );
    }
}
