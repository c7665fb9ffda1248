package csidriver

// What a NodePublishVolume asks for, as the `fencefs mount` it becomes:
// the volume's attributes and mount flags are fencefs's own -o options,
// its secret is the child's environment. Pure functions, no I/O.

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// AttrBucket is the volume attribute naming the bucket, as the Mountpoint
// for S3 and gcsfuse CSI drivers name it.
const AttrBucket = "bucketName"

// The keys of a volume's secret (nodePublishSecretRef), named as the
// environment variables fencefs reads, so that one Secret serves both the
// driver and the application's `fencefs run` (envFrom).
const (
	SecretAccessKeyID     = "AWS_ACCESS_KEY_ID"
	SecretSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	SecretSessionToken    = "AWS_SESSION_TOKEN"
)

var secretKeys = []string{SecretAccessKeyID, SecretSecretAccessKey, SecretSessionToken}

// driverOwned are -o options the driver sets itself, or that a volume must
// not set, with why (both spellings: the -o name and the dotted key).
var driverOwned = map[string]string{
	"token":                      "the volume comes up without a token; the pod binds one through the mount (fencefs run --mount)",
	"fence.token":                "the volume comes up without a token; the pod binds one through the mount (fencefs run --mount)",
	"token_file":                 "the volume comes up without a token; the pod binds one through the mount (fencefs run --mount)",
	"fence.token_file":           "the volume comes up without a token; the pod binds one through the mount (fencefs run --mount)",
	"cache_dir":                  "the driver gives each volume a cache directory under its --state-dir",
	"mount.cache_dir":            "the driver gives each volume a cache directory under its --state-dir",
	"log_file":                   "the driver gives each volume a log file under its --state-dir",
	"log.file":                   "the driver gives each volume a log file under its --state-dir",
	"config":                     "a volume is configured by its attributes only",
	"nonempty":                   "the driver mounts only on the empty directory it creates",
	"mount.nonempty":             "the driver mounts only on the empty directory it creates",
	"credentials_file":           "credentials come from the volume's secret (nodePublishSecretRef)",
	"s3.credentials_file":        "credentials come from the volume's secret (nodePublishSecretRef)",
	"web_identity_token_file":    "the driver writes the pod's service-account token for the mount (authenticationSource: pod)",
	"s3.web_identity_token_file": "the driver writes the pod's service-account token for the mount (authenticationSource: pod)",
}

// volumeSpec is one published volume: what is mounted where, and how.
type volumeSpec struct {
	VolumeID string
	Target   string
	Bucket   string
	// Options are fencefs -o options by name (attributes, then mount
	// flags, then the driver's own), without credentials.
	Options map[string]string
	Mode    csi.VolumeCapability_AccessMode_Mode
	// Env is the credentials for the child's environment: never stored,
	// logged or compared.
	Env []string
	// Audience is the audience of the pod's service-account token the
	// volume is mounted with (authenticationSource: pod; "*" for the only
	// one given), "" when it uses Env (podtoken.go).
	Audience string
	// Token is that token: never stored but in the volume's token file,
	// never logged or compared.
	Token string
	// TokenFile is the file the mount reads the token from (the runner
	// sets it: the volume directory's tokenFile).
	TokenFile string
}

// Identity is what two publishes of one target must share to be the same
// publish: everything but the credentials.
func (s volumeSpec) Identity() string {
	id := fmt.Sprintf("volume=%q target=%q bucket=%q mode=%s options=%s", s.VolumeID, s.Target, s.Bucket, s.Mode, s.optionList())
	if s.Audience != "" {
		id += fmt.Sprintf(" auth=pod audience=%q", s.Audience)
	}
	return id
}

// ReadOnly reports whether the volume is mounted read-only.
func (s volumeSpec) ReadOnly() bool {
	v, ok := s.Options["read_only"]
	return ok && v == "true"
}

// optionList is the -o value: name=value pairs sorted by name.
func (s volumeSpec) optionList() string {
	names := make([]string, 0, len(s.Options))
	for n := range s.Options {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, n+"="+s.Options[n])
	}
	return strings.Join(parts, ",")
}

// mountArgs is the command line of the `fencefs mount` that publishes s,
// with its cache and log under volDir. It holds no credential: a pod's
// token is named by its file.
func (s volumeSpec) mountArgs(cacheDir, logFile string) []string {
	opts := s.optionList()
	if s.TokenFile != "" {
		opts += ",web_identity_token_file=" + s.TokenFile
	}
	return []string{"mount", s.Bucket, s.Target,
		// The node's /etc/fencefs/config.yaml (or the image's) must not
		// change a volume behind its attributes.
		"--config", "/dev/null",
		"--cache-dir", cacheDir, "--log-file", logFile,
		"-o", opts}
}

// invalid is an InvalidArgument status with a one-line message.
func invalid(format string, a ...any) error {
	return status.Errorf(codes.InvalidArgument, format, a...)
}

// parsePublish turns a NodePublishVolume request into the volumeSpec to
// mount; a request that cannot be is an InvalidArgument status whose
// message is one line naming the field. driverEnv is the driver's own
// environment, whose credentials a volume without a secret uses.
func parsePublish(req *csi.NodePublishVolumeRequest, driverEnv []string) (volumeSpec, error) {
	s := volumeSpec{VolumeID: req.GetVolumeId(), Target: req.GetTargetPath(), Options: map[string]string{}}
	switch {
	case s.VolumeID == "":
		return s, invalid("volume_id is missing")
	case s.Target == "":
		return s, invalid("target_path is missing")
	case !filepath.IsAbs(s.Target):
		return s, invalid("target_path %q is not an absolute path", s.Target)
	case req.GetVolumeCapability() == nil:
		return s, invalid("volume_capability is missing")
	case req.GetVolumeCapability().GetBlock() != nil:
		return s, invalid("block access is not supported: a fencefs volume is a filesystem (volumeMode: Filesystem)")
	case req.GetVolumeCapability().GetMount() == nil:
		return s, invalid("volume_capability has no access type (accepted: mount)")
	}
	s.Mode = req.GetVolumeCapability().GetAccessMode().GetMode()
	if s.Mode == csi.VolumeCapability_AccessMode_UNKNOWN {
		return s, invalid("volume_capability has no access mode")
	}
	if err := s.addAttributes(req.GetVolumeContext()); err != nil {
		return s, err
	}
	if err := s.addMountFlags(req.GetVolumeCapability().GetMount().GetMountFlags()); err != nil {
		return s, err
	}
	if req.GetReadonly() || readOnlyMode(s.Mode) {
		s.Options["read_only"] = "true"
	}
	if _, ok := s.Options["allow_other"]; !ok {
		// The pod's processes are not the driver's user: without it,
		// only root could use the volume.
		s.Options["allow_other"] = "true"
	}
	aud, err := podAuthFrom("volume attribute", req.GetVolumeContext())
	if err != nil {
		return s, err
	}
	if aud != "" {
		if len(req.GetSecrets()) > 0 {
			return s, invalid("a volume with %s: %s is mounted with its pod's service-account token: give it no secret (nodePublishSecretRef)", AttrAuthenticationSource, AuthPod)
		}
		tok, err := podTokenFrom(req.GetVolumeContext(), aud)
		if err != nil {
			return s, err
		}
		s.Audience, s.Token = aud, tok
		return s, nil
	}
	env, err := credentialsEnv(req.GetSecrets(), driverEnv)
	if err != nil {
		return s, err
	}
	s.Env = env
	return s, nil
}

// addAttributes reads the volume context: bucketName, and fencefs -o
// options by name. Keys with a '/' are the CO's own (csi.storage.k8s.io/…)
// and ignored.
func (s *volumeSpec) addAttributes(attrs map[string]string) error {
	s.Bucket = strings.TrimSpace(attrs[AttrBucket])
	if err := checkBucket("volume attribute "+AttrBucket, s.Bucket); err != nil {
		return err
	}
	names := make([]string, 0, len(attrs))
	for k := range attrs {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if k == AttrBucket || podAuthAttrs[k] || strings.Contains(k, "/") {
			continue
		}
		if err := s.setOption("volume attribute", k, attrs[k]); err != nil {
			return err
		}
	}
	return nil
}

// checkBucket refuses a bucket name that is missing, holds a '/' (a key
// prefix is the attribute prefix), or starts with '-' (`fencefs mount`
// would read it as a flag: a bucket name starts with a letter or digit).
func checkBucket(what, bucket string) error {
	switch {
	case bucket == "":
		return invalid("%s is missing: the bucket to mount (see docs/CSI.md)", what)
	case strings.Contains(bucket, "/"):
		return invalid("%s %q holds a '/': give the bucket alone and the key prefix as the attribute prefix", what, bucket)
	case strings.HasPrefix(bucket, "-"):
		return invalid("%s %q is not a bucket name (it starts with '-')", what, bucket)
	}
	return nil
}

// addMountFlags reads the PersistentVolume's mountOptions, each an -o
// list ("uid=1000", "ro", "attr_ttl=5s,meta_ttl=10s").
func (s *volumeSpec) addMountFlags(flags []string) error {
	for _, f := range flags {
		for _, item := range strings.Split(f, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			name, value, ok := strings.Cut(item, "=")
			switch {
			case name == "ro" && !ok:
				name, value = "read_only", "true"
			case name == "rw" && !ok:
				name, value = "read_only", "false"
			case !ok:
				value = "true"
			}
			if err := s.setOption("mount option", name, value); err != nil {
				return err
			}
		}
	}
	return nil
}

// setOption records the -o option name=value from where, refusing what
// the driver owns, credentials and a second, different value.
func (s *volumeSpec) setOption(where, name, value string) error {
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	if why, ok := driverOwned[name]; ok {
		return invalid("%s %s is not accepted: %s", where, name, why)
	}
	for _, k := range []string{"access_key", "secret_key", "session_token", "s3.access_key", "s3.secret_key", "s3.session_token"} {
		if name == k {
			return invalid("%s %s is not accepted: credentials go in the volume's secret (nodePublishSecretRef) as %s", where, name, strings.Join(secretKeys, ", "))
		}
	}
	if name == "" || strings.ContainsAny(name, ", =") || strings.Contains(value, ",") {
		return invalid("%s %q=%q is not an option (accepted: NAME=VALUE without ',', NAME a fencefs -o option: docs/CLI.md)", where, name, value)
	}
	if prev, ok := s.Options[name]; ok && prev != value {
		return invalid("%s %s=%s contradicts %s=%s given before", where, name, value, name, prev)
	}
	s.Options[name] = value
	return nil
}

// readOnlyMode reports whether an access mode only reads.
func readOnlyMode(m csi.VolumeCapability_AccessMode_Mode) bool {
	return m == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY || m == csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
}

// credentialsEnv is the credentials part of the child's environment: the
// volume's secret when it has one (only the keys secretKeys, an access key
// with its secret key), else the driver's own credential variables.
func credentialsEnv(secrets map[string]string, driverEnv []string) ([]string, error) {
	if len(secrets) == 0 {
		var env []string
		for _, kv := range driverEnv {
			for _, k := range secretKeys {
				if strings.HasPrefix(kv, k+"=") {
					env = append(env, kv)
				}
			}
		}
		return env, nil
	}
	var env []string
	for k := range secrets {
		known := false
		for _, sk := range secretKeys {
			known = known || k == sk
		}
		if !known {
			return nil, invalid("secret key %q is not accepted (accepted: %s)", k, strings.Join(secretKeys, ", "))
		}
	}
	if (secrets[SecretAccessKeyID] == "") != (secrets[SecretSecretAccessKey] == "") {
		return nil, invalid("the volume's secret needs both %s and %s", SecretAccessKeyID, SecretSecretAccessKey)
	}
	for _, k := range secretKeys {
		if v := secrets[k]; v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env, nil
}

// secretValues are the credential values of env, for redacting messages.
func secretValues(env []string) []string {
	var out []string
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != SecretAccessKeyID && len(v) >= 4 {
			out = append(out, v)
		}
	}
	return out
}
