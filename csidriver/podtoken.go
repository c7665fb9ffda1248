package csidriver

// Workload identity: a volume mounted with its pod's own service-account
// token instead of a shared Secret's keys.
//
// The case. A Secret of keys per namespace gives every pod of the
// namespace what the keys reach. With `tokenRequests` in the CSIDriver
// object (deploy/kubernetes/csidriver.yaml), kubelet puts a token of the
// pod's service account, for each audience listed, into every
// NodePublishVolume's volume context under tokensKey, and with
// `requiresRepublish` it publishes again, with a fresh token, before the
// last one expires. A volume whose attributes say
// authenticationSource: pod is then mounted by web identity: the token is
// exchanged by STS AssumeRoleWithWebIdentity (role_arn, sts_endpoint, as
// any fencefs mount: docs/CLI.md) for credentials that a role policy can
// limit to the workload's own prefix (MinIO's ${jwt:sub}, docs/CSI.md).
//
// The rule. The token is never an argument, an environment variable, a
// record, a log line or a message: the driver writes it to the file
// tokenFile in the volume's own directory under --state-dir (0600,
// written beside and renamed over, so that a reader sees one whole
// token), and the mount reads that file at each renewal of its
// credentials (s3.web_identity_token_file). A publish again of a mounted
// volume rewrites the file and changes nothing else: no remount, no
// second process. Neither the secret (nodePublishSecretRef) nor the
// driver's own keys are used for such a volume: a secret given with it
// is refused, so that it is never unclear which identity a mount has.
//
// Decided here: which attributes ask for it (podAuthFrom), which token of
// the context is the volume's (podTokenFrom), how the file is written
// (writeTokenFile). NodePublishVolume (node.go) calls them.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The volume attributes (and StorageClass parameters) of workload
// identity; role_arn and sts_endpoint are fencefs -o options.
const (
	// AttrAuthenticationSource is "driver" (the default: the volume's
	// secret, else the driver's own credentials) or "pod" (the pod's
	// service-account token, by web identity). The name and values are
	// those of the Mountpoint for S3 CSI driver.
	AttrAuthenticationSource = "authenticationSource"
	// AttrTokenAudience is the audience of the pod's token to use, one of
	// the CSIDriver's tokenRequests; without it, the only one given.
	AttrTokenAudience = "tokenAudience"

	AuthDriver = "driver"
	AuthPod    = "pod"
)

// tokensKey is the volume context key under which kubelet passes the
// pod's service-account tokens (CSIDriver tokenRequests): JSON
// {"AUDIENCE": {"token": "…", "expirationTimestamp": "…"}, …}.
const tokensKey = "csi.storage.k8s.io/serviceAccount.tokens"

// tokenFile is the file of a volume's directory holding its pod's token.
const tokenFile = "token"

// podAuthAttrs are the attributes podAuthFrom reads; they are no fencefs
// -o options.
var podAuthAttrs = map[string]bool{AttrAuthenticationSource: true, AttrTokenAudience: true}

// podAuthFrom reads whether attrs ask for the pod's token: "" for the
// driver's credentials, else the audience asked ("*" for whichever one
// token the context carries). A mistake is InvalidArgument.
func podAuthFrom(what string, attrs map[string]string) (string, error) {
	src := strings.TrimSpace(attrs[AttrAuthenticationSource])
	aud := strings.TrimSpace(attrs[AttrTokenAudience])
	switch src {
	case "", AuthDriver:
		if aud != "" {
			return "", invalid("%s %s is given without %s: %s", what, AttrTokenAudience, AttrAuthenticationSource, AuthPod)
		}
		return "", nil
	case AuthPod:
		if aud == "" {
			return "*", nil
		}
		return aud, nil
	}
	return "", invalid("%s %s %q is not accepted (accepted: %s, %s)", what, AttrAuthenticationSource, src, AuthDriver, AuthPod)
}

// podTokenFrom is the token for audience ("*": the only one) among the
// tokens kubelet put in the volume context. Without them the CSIDriver
// has no tokenRequests (FailedPrecondition); malformed JSON or an empty
// token is InvalidArgument; an audience not among them is
// FailedPrecondition. No message holds a token.
func podTokenFrom(ctx map[string]string, audience string) (string, error) {
	raw, ok := ctx[tokensKey]
	if !ok || strings.TrimSpace(raw) == "" {
		return "", status.Errorf(codes.FailedPrecondition, "the volume asks for its pod's service-account token (%s: %s) but the publish carries none (%s): give the CSIDriver %s tokenRequests and requiresRepublish: true (deploy/kubernetes/csidriver.yaml)",
			AttrAuthenticationSource, AuthPod, tokensKey, Name)
	}
	var tokens map[string]struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal([]byte(raw), &tokens); err != nil {
		// The error's text could quote the content: only its place.
		where := ""
		var se *json.SyntaxError
		if errors.As(err, &se) {
			where = fmt.Sprintf(" (at byte %d)", se.Offset)
		}
		return "", invalid("volume context %s is not JSON of the form {\"AUDIENCE\": {\"token\": …}}%s", tokensKey, where)
	}
	auds := make([]string, 0, len(tokens))
	for a := range tokens {
		auds = append(auds, a)
	}
	sort.Strings(auds)
	if audience == "*" {
		if len(auds) != 1 {
			return "", invalid("volume context %s holds tokens for %d audiences (%s): give the volume a %s", tokensKey, len(auds), strings.Join(auds, ", "), AttrTokenAudience)
		}
		audience = auds[0]
	}
	tok, ok := tokens[audience]
	if !ok {
		return "", status.Errorf(codes.FailedPrecondition, "the pod's service-account token for audience %q is not in the publish (it has: %s): add it to the CSIDriver %s tokenRequests",
			audience, strings.Join(auds, ", "), Name)
	}
	if strings.TrimSpace(tok.Token) == "" {
		return "", invalid("volume context %s: the token for audience %q is empty", tokensKey, audience)
	}
	return strings.TrimSpace(tok.Token), nil
}

// writeTokenFile replaces the token file of the volume directory dir by
// one holding token, readable by root only: written beside it and renamed
// over it, so that the mount, which reads it at each renewal of its
// credentials, never reads half of one.
func writeTokenFile(dir, token string) error {
	f, err := os.CreateTemp(dir, tokenFile+".*.tmp")
	if err != nil {
		return fmt.Errorf("the pod's token in %s: %v", dir, unwrap(err))
	}
	tmp := f.Name()
	_, werr := f.WriteString(token)
	if werr == nil {
		werr = f.Sync()
	}
	if err := errors.Join(werr, f.Close()); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("the pod's token in %s: %v", dir, unwrap(err))
	}
	// CreateTemp makes it 0600 already; the rename keeps it.
	if err := os.Rename(tmp, filepath.Join(dir, tokenFile)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("the pod's token in %s: %v", dir, unwrap(err))
	}
	return nil
}

// checkTokenFile reports whether the token file of the volume directory
// dir is there for a mount: a regular file, root's only.
func checkTokenFile(dir string) (string, error) {
	path := filepath.Join(dir, tokenFile)
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		return "", status.Errorf(codes.FailedPrecondition, "the pod's token file %s: %v (the driver writes it before it asks for the mount)", path, unwrap(err))
	case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0:
		return "", status.Errorf(codes.FailedPrecondition, "the pod's token file %s is not a regular file of mode 0600 (%s)", path, fi.Mode())
	}
	return path, nil
}
