// Package csidriver is fencefs's CSI driver: the node driver (`fencefs
// csi`) serves the CSI Identity and Node services on a unix socket, so that
// Kubernetes (kubelet) mounts a bucket into a pod as a fencefs volume; the
// controller (`fencefs csi --controller`, controller.go) serves the
// Identity and Controller services, so that a StorageClass provisions a
// volume per claim: a prefix of a bucket with a fence domain of its own
// (provision.go).
//
// A volume's attributes name the bucket (bucketName, and any `fencefs
// mount -o` option by its name: prefix, endpoint, fence_mode, meta_ttl,
// uid, …): a static PersistentVolume's (or an inline CSI volume's) are
// written by hand, a provisioned one's by CreateVolume. Its credentials
// are in a Secret (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN), or, with authenticationSource: pod, are its pod's
// service-account token exchanged by web identity (podtoken.go).
//
// Every NodePublishVolume is one `fencefs mount` process of its own at the
// pod's target path, never shared with another pod, even on the same node
// and of the same volume: the fencing token is bound per mount, and two
// pods sharing one mount would share one token, so the old leader of the
// two would not be fenced. The mount comes up without a token — read-only
// until the pod's own `fencefs run --mount` binds one through the mount's
// root xattr. Credentials reach the mount process in its environment only:
// never on its command line, in a record or in a log.
//
// The mount process runs in a session of its own, not as a child the
// driver waits for: it outlives the driver. In a container it does not
// outlive the container, so in the node plugin's pod the driver does not
// start it: it asks the mounter (Mounter, `fencefs csi mounter`, the main
// process of a container of its own: mounterd.go) over a unix socket
// (Options.MounterSocket, runner.go), and the mount processes are the
// mounter's container's. What a restarted driver lost is only its memory
// of the mounts; it reads it back from the records in Options.StateDir
// and /proc/self/mountinfo (adopt.go). Every call is
// idempotent as the CSI specification asks: a repeated publish with the
// same arguments succeeds, with others it is AlreadyExists; unpublishing a
// target that is not mounted succeeds.
//
// The driver never touches a mounted directory itself but for the statfs
// of NodeGetVolumeStats, which has a timeout: a stopped fencefs process
// would hang whoever does. It reads mountinfo instead.
package csidriver
