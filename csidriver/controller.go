package csidriver

// The Controller service (`fencefs csi --controller`, a Deployment beside
// the external-provisioner sidecar): a volume per claim. CreateVolume makes
// a prefix of a StorageClass's bucket with a fence domain of its own;
// DeleteVolume removes every object under it, or keeps them, as the
// StorageClass's onDelete says. What a volume is, and the record that
// makes both calls idempotent and safe, is in provision.go.
//
// The controller never deletes outside a volume's own prefix, never a
// prefix without the record CreateVolume wrote there, and never a prefix
// holding another volume's record: nothing a user did not ask to delete is
// deleted. It reaches one S3 server, its own configuration (ControllerOptions),
// with the credentials of each request's secret (the StorageClass's
// csi.storage.k8s.io/provisioner-secret-*), else its own (its environment,
// or web identity): never on a command line, in a log or in an error.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/s3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ControllerOptions configure a Controller.
type ControllerOptions struct {
	// Endpoint is the URL of the S3 server of the volumes (required);
	// Region, PathStyle and CAFile as for `fencefs mount`. Endpoint,
	// Region and PathStyle reach every volume's context, so that its
	// mounts reach the same server (CAFile is a path in the controller's
	// container: give the nodes theirs as the ca_file parameter).
	Endpoint  string
	Region    string
	PathStyle bool
	CAFile    string
	// WebIdentityTokenFile and RoleARN are the controller's own
	// credentials by web identity (AWS_WEB_IDENTITY_TOKEN_FILE,
	// AWS_ROLE_ARN), for a request without a secret; without them such a
	// request uses the controller's AWS_ACCESS_KEY_ID and friends.
	WebIdentityTokenFile string
	RoleARN              string
	// Version is reported by GetPluginInfo.
	Version string
	// Logger receives the controller's log; nil discards it.
	Logger *slog.Logger
}

// Controller serves the CSI Identity and Controller services. Its methods
// are safe for concurrent use; calls on one volume are serialized (a
// second one while the first runs is Aborted, which the CO retries).
type Controller struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer

	opts    ControllerOptions
	log     *slog.Logger
	open    storeOpener
	buckets bucketAdmin // bucket-per-volume volumes' buckets
	now     func() time.Time

	busy busyTargets // calls on one volume id, one at a time
}

// storeOpener connects to bucket with the credentials of a request's
// secrets (none: the controller's own); close releases the store. Its
// errors wrap the objstore sentinels.
type storeOpener func(ctx context.Context, bucket string, secrets map[string]string) (st objstore.Store, close func(), err error)

// NewController returns a Controller for opts.
func NewController(opts ControllerOptions) (*Controller, error) {
	if opts.Endpoint == "" {
		return nil, errors.New("the S3 endpoint of the volumes is missing (--s3-endpoint)")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Controller{opts: opts, log: opts.Logger, now: time.Now}
	c.open, c.buckets = c.openS3, s3Buckets{c}
	return c, nil
}

// openS3 is the storeOpener of a real server.
func (c *Controller) openS3(ctx context.Context, bucket string, secrets map[string]string) (objstore.Store, func(), error) {
	st, err := s3.New(ctx, c.s3Config(bucket, secrets))
	if err != nil {
		return nil, nil, err
	}
	return st, st.Close, nil
}

// s3Config is the configuration of a store of bucket with the credentials
// of secrets (none: the controller's own).
func (c *Controller) s3Config(bucket string, secrets map[string]string) s3.Config {
	cfg := s3.Config{Endpoint: c.opts.Endpoint, Bucket: bucket, Region: c.opts.Region, PathStyle: c.opts.PathStyle,
		CAFile: c.opts.CAFile, Logger: c.log}
	if len(secrets) > 0 {
		cfg.AccessKey, cfg.SecretKey, cfg.SessionToken = secrets[SecretAccessKeyID], secrets[SecretSecretAccessKey], secrets[SecretSessionToken]
	} else {
		cfg.WebIdentityTokenFile, cfg.RoleARN = c.opts.WebIdentityTokenFile, c.opts.RoleARN
	}
	return cfg
}

// serverContext are the volume attributes of the controller's S3 server.
func (c *Controller) serverContext() map[string]string {
	m := map[string]string{"endpoint": c.opts.Endpoint}
	if c.opts.Region != "" {
		m["region"] = c.opts.Region
	}
	if c.opts.PathStyle {
		m["path_style"] = "true"
	}
	return m
}

// Serve answers CSI calls on ln until ctx ends, then stops the server
// (calls in progress are given stopGrace).
func (c *Controller) Serve(ctx context.Context, ln net.Listener) error {
	srv := grpc.NewServer(grpc.UnaryInterceptor(logCalls(c.log)))
	csi.RegisterIdentityServer(srv, c)
	csi.RegisterControllerServer(srv, c)
	c.log.Info("serving the controller", "driver", Name, "version", c.opts.Version, "endpoint", ln.Addr().String(),
		"s3_endpoint", c.opts.Endpoint, "s3_region", c.opts.Region)
	return serveGRPC(ctx, srv, ln)
}

// GetPluginInfo names the driver and its version.
func (c *Controller) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: Name, VendorVersion: c.opts.Version}, nil
}

// GetPluginCapabilities reports the Controller service; no topology
// (every node reaches the bucket).
func (c *Controller) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}},
	}}}, nil
}

// Probe is always ready: the controller reaches S3 with each request's
// credentials, which a probe does not have.
func (c *Controller) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

// ControllerGetCapabilities: CreateVolume and DeleteVolume, and the
// single-node access modes. No attach (ControllerPublish), listing,
// capacity, snapshots, clones or expansion.
func (c *Controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	rpc := func(t csi.ControllerServiceCapability_RPC_Type) *csi.ControllerServiceCapability {
		return &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}}
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{
		rpc(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME),
		rpc(csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER),
	}}, nil
}

// checkCapabilities refuses capabilities a volume cannot have: block
// access, a missing access type or mode.
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return invalid("volume_capabilities is missing")
	}
	for _, vc := range caps {
		switch {
		case vc.GetBlock() != nil:
			return invalid("block access is not supported: a fencefs volume is a filesystem (volumeMode: Filesystem)")
		case vc.GetMount() == nil:
			return invalid("a volume capability has no access type (accepted: mount)")
		case vc.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_UNKNOWN:
			return invalid("a volume capability has no access mode")
		}
	}
	return nil
}

// CreateVolume makes the volume req names: the prefix PREFIX/NAME/ of the
// StorageClass's bucket, its record written there first. The same name
// with the same capacity and parameters returns the same volume; with
// others it is AlreadyExists. A prefix that holds objects no CreateVolume
// made, or lies inside another volume, is refused (FailedPrecondition).
func (c *Controller) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, invalid("name is missing")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	if req.GetVolumeContentSource() != nil {
		return nil, invalid("a volume content source (a snapshot or a volume to clone) is not supported")
	}
	if cr := req.GetCapacityRange(); cr.GetRequiredBytes() < 0 || cr.GetLimitBytes() < 0 ||
		cr.GetLimitBytes() > 0 && cr.GetRequiredBytes() > cr.GetLimitBytes() {
		return nil, status.Errorf(codes.OutOfRange, "capacity range required %d, limit %d bytes is not a range", cr.GetRequiredBytes(), cr.GetLimitBytes())
	}
	p, err := parseClassParams(req.GetParameters())
	if err != nil {
		return nil, err
	}
	if err := checkSecrets(req.GetSecrets()); err != nil {
		return nil, err
	}
	want := newRecord(req, p, c.serverContext(), c.now())
	id := volumeID(want.Bucket, want.Prefix)
	if len(id) > maxVolumeID {
		return nil, invalid("volume id %q would be longer than %d bytes: give a shorter %s", id, maxVolumeID, ParamPrefix)
	}
	if err := c.busy.claim(id); err != nil {
		return nil, err
	}
	defer c.busy.release(id)

	if want.Kind == kindBucket {
		if err := c.buckets.makeBucket(ctx, want.Bucket, req.GetSecrets()); errors.Is(err, objstore.ErrConflict) {
			return nil, status.Errorf(codes.FailedPrecondition, "bucket %s of volume %q exists and is not the provisioner's credentials' own: %v", want.Bucket, req.GetName(), err)
		} else if err != nil {
			return nil, storeStatus(err, "bucket "+want.Bucket, req.GetSecrets())
		}
	}
	st, closeStore, err := c.open(ctx, want.Bucket, req.GetSecrets())
	if err != nil {
		return nil, storeStatus(err, "bucket "+want.Bucket, req.GetSecrets())
	}
	defer closeStore()
	for attempt := 0; ; attempt++ {
		got, _, err := readRecord(ctx, st, want.Bucket, want.Prefix)
		switch {
		case err == nil:
			if why := got.sameRequest(want); why != "" {
				return nil, status.Errorf(codes.AlreadyExists, "volume %q exists at s3://%s/%s, but %s", req.GetName(), want.Bucket, want.Prefix, why)
			}
			return createResponse(id, got), nil
		case !errors.Is(err, objstore.ErrNotFound):
			return nil, storeStatus(err, "volume "+id, req.GetSecrets())
		}
		if err := c.checkFreePrefix(ctx, st, want); err != nil {
			return nil, storeStatus(err, "volume "+id, req.GetSecrets())
		}
		body := encodeRecord(want)
		_, err = st.Put(ctx, want.Prefix+recordKey, bytes.NewReader(body), int64(len(body)),
			objstore.PutOptions{Cond: objstore.Condition{IfNoneMatch: true}, ContentType: "application/json"})
		switch {
		case err == nil:
			c.log.Info("volume created", "name", req.GetName(), "volume_id", id, "on_delete", want.OnDelete)
			return createResponse(id, want), nil
		case errors.Is(err, objstore.ErrPrecondition) && attempt < 2:
			continue // made meanwhile (by a retry of this call): read it
		}
		return nil, storeStatus(err, "volume "+id, req.GetSecrets())
	}
}

// errRefused is a refusal of the controller's own, with its status code.
type errRefused struct {
	code codes.Code
	msg  string
}

func (e *errRefused) Error() string { return e.msg }

// checkFreePrefix refuses a new volume's prefix that lies inside another
// volume or holds objects no CreateVolume made.
func (c *Controller) checkFreePrefix(ctx context.Context, st objstore.Store, want volumeRecord) error {
	for _, a := range ancestors(want.Prefix) {
		if _, err := st.Stat(ctx, a+recordKey); err == nil {
			return &errRefused{codes.FailedPrecondition, fmt.Sprintf("s3://%s/%s lies inside volume s3://%s/%s: give the StorageClass a %s outside it", want.Bucket, want.Prefix, want.Bucket, a, ParamPrefix)}
		} else if !errors.Is(err, objstore.ErrNotFound) {
			return err
		}
	}
	var found string
	err := st.List(ctx, want.Prefix, "", func(e objstore.Entry) error {
		found = e.Key
		return io.EOF
	})
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if found != "" {
		return &errRefused{codes.FailedPrecondition, fmt.Sprintf("s3://%s/%s holds objects no CreateVolume made (%s): it is not made a volume; remove them or give the StorageClass another %s", want.Bucket, want.Prefix, found, ParamPrefix)}
	}
	return nil
}

// createResponse is the answer of CreateVolume for the volume r.
func createResponse(id string, r volumeRecord) *csi.CreateVolumeResponse {
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: id, CapacityBytes: r.RequiredBytes, VolumeContext: r.Context}}
}

// readRecord reads the record of the volume at prefix of bucket, and its
// ETag; ErrNotFound when there is none.
func readRecord(ctx context.Context, st objstore.Store, bucket, prefix string) (volumeRecord, string, error) {
	rc, info, err := st.Get(ctx, prefix+recordKey, objstore.GetOptions{})
	if err != nil {
		return volumeRecord{}, "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxBody))
	if err != nil {
		return volumeRecord{}, "", err
	}
	r, err := decodeRecord(b, bucket, prefix)
	if err != nil {
		return r, "", &errRefused{codes.FailedPrecondition, err.Error()}
	}
	return r, info.ETag, nil
}

// DeleteVolume removes the volume: with onDelete: delete, every object
// under its prefix (its files, its fence domain's register, intents and
// tombstones, incomplete uploads), its record last; with retain (the
// default), nothing but a mark in its record. A volume id this controller
// never returned, or whose record is gone, is success: there is nothing
// of it to delete, and nothing else is deleted.
func (c *Controller) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, invalid("volume_id is missing")
	}
	if err := checkSecrets(req.GetSecrets()); err != nil {
		return nil, err
	}
	bucket, prefix, ok := parseVolumeID(id)
	if !ok {
		c.log.Info("volume id is none of this controller's: nothing to delete", "volume_id", id)
		return &csi.DeleteVolumeResponse{}, nil
	}
	if err := c.busy.claim(id); err != nil {
		return nil, err
	}
	defer c.busy.release(id)
	st, closeStore, err := c.open(ctx, bucket, req.GetSecrets())
	if errors.Is(err, objstore.ErrNoBucket) {
		c.log.Info("the volume's bucket is gone: nothing to delete", "volume_id", id)
		return &csi.DeleteVolumeResponse{}, nil
	} else if err != nil {
		return nil, storeStatus(err, "bucket "+bucket, req.GetSecrets())
	}
	defer closeStore()
	r, etag, err := readRecord(ctx, st, bucket, prefix)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		c.log.Info("no volume record at the volume's prefix: nothing to delete", "volume_id", id)
		return &csi.DeleteVolumeResponse{}, nil
	case err != nil:
		return nil, storeStatus(err, "volume "+id, req.GetSecrets())
	case r.RetainedAt != nil:
		return &csi.DeleteVolumeResponse{}, nil
	case r.OnDelete != OnDeleteDelete:
		now := c.now().UTC().Truncate(time.Second)
		r.RetainedAt = &now
		body := encodeRecord(r)
		if _, err := st.Put(ctx, prefix+recordKey, bytes.NewReader(body), int64(len(body)),
			objstore.PutOptions{Cond: objstore.Condition{IfMatch: etag}, ContentType: "application/json"}); err != nil {
			return nil, storeStatus(err, "volume "+id, req.GetSecrets())
		}
		c.log.Info("volume deleted, its objects retained", "volume_id", id, "name", r.Name)
		return &csi.DeleteVolumeResponse{}, nil
	}
	n, err := removePrefix(ctx, st, bucket, prefix)
	if err != nil {
		return nil, storeStatus(err, "volume "+id, req.GetSecrets())
	}
	if r.Kind == kindBucket {
		putRecord := func() error {
			body := encodeRecord(r)
			_, err := st.Put(ctx, prefix+recordKey, bytes.NewReader(body), int64(len(body)),
				objstore.PutOptions{Cond: objstore.Condition{IfNoneMatch: true}, ContentType: "application/json"})
			return err
		}
		if err := c.removeBucketVolume(ctx, r, req.GetSecrets(), putRecord); err != nil {
			return nil, storeStatus(err, "volume "+id, req.GetSecrets())
		}
	}
	c.log.Info("volume deleted with its objects", "volume_id", id, "name", r.Name, "objects", n)
	return &csi.DeleteVolumeResponse{}, nil
}

// deletePasses bounds how many times removePrefix lists and deletes: more
// objects after that means something still writes the volume.
const deletePasses = 3

// removePrefix deletes every object under prefix (which holds the record
// of a volume), the record last, and aborts its incomplete uploads; it
// deletes nothing when prefix holds another volume's record. It returns
// how many objects it deleted.
func removePrefix(ctx context.Context, st objstore.Store, bucket, prefix string) (int, error) {
	own := prefix + recordKey
	err := st.ListUploads(ctx, prefix, func(u objstore.Upload) error {
		if err := st.AbortUpload(ctx, u.Key, u.UploadID); err != nil && !errors.Is(err, objstore.ErrNotFound) && !errors.Is(err, objstore.ErrConflict) {
			return err
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	deleted := 0
	for pass := 0; ; pass++ {
		var keys []string
		err := st.List(ctx, prefix, "", func(e objstore.Entry) error {
			if isNestedRecord(e.Key, prefix) {
				return &errRefused{codes.FailedPrecondition, fmt.Sprintf("s3://%s/%s holds another volume's record (%s): nothing deleted", bucket, prefix, e.Key)}
			}
			if e.Key != own {
				keys = append(keys, e.Key)
			}
			return nil
		})
		if err != nil {
			return deleted, err
		}
		if len(keys) == 0 {
			break
		}
		if pass == deletePasses {
			return deleted, &errRefused{codes.FailedPrecondition, fmt.Sprintf("s3://%s/%s: objects keep appearing (%d after %d passes): is the volume still mounted?", bucket, prefix, len(keys), deletePasses)}
		}
		for len(keys) > 0 {
			batch := keys[:min(len(keys), 1000)]
			keys = keys[len(batch):]
			if err := st.DeleteMany(ctx, batch); err != nil {
				return deleted, err
			}
			deleted += len(batch)
		}
	}
	if err := st.Delete(ctx, own, objstore.Condition{}); err != nil {
		return deleted, err
	}
	return deleted + 1, nil
}

// ValidateVolumeCapabilities confirms the capabilities of a volume that
// exists: every mount access mode is; block access is not.
func (c *Controller) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	id := req.GetVolumeId()
	switch {
	case id == "":
		return nil, invalid("volume_id is missing")
	case len(req.GetVolumeCapabilities()) == 0:
		return nil, invalid("volume_capabilities is missing")
	}
	if err := checkSecrets(req.GetSecrets()); err != nil {
		return nil, err
	}
	bucket, prefix, ok := parseVolumeID(id)
	notFound := status.Errorf(codes.NotFound, "volume %q does not exist", id)
	if !ok {
		return nil, notFound
	}
	st, closeStore, err := c.open(ctx, bucket, req.GetSecrets())
	if errors.Is(err, objstore.ErrNoBucket) {
		return nil, notFound
	} else if err != nil {
		return nil, storeStatus(err, "bucket "+bucket, req.GetSecrets())
	}
	defer closeStore()
	r, _, err := readRecord(ctx, st, bucket, prefix)
	switch {
	case errors.Is(err, objstore.ErrNotFound) || err == nil && r.RetainedAt != nil:
		return nil, notFound
	case err != nil:
		return nil, storeStatus(err, "volume "+id, req.GetSecrets())
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters(),
	}}, nil
}

// checkSecrets refuses a secret with keys other than the credentials'.
func checkSecrets(secrets map[string]string) error {
	if len(secrets) == 0 {
		return nil
	}
	_, err := credentialsEnv(secrets, nil)
	return err
}

// storeStatus is err, from the store or the controller, as a gRPC status
// with a one-line message (what names the object of the call), without
// the values of secrets.
func storeStatus(err error, what string, secrets map[string]string) error {
	var refused *errRefused
	if errors.As(err, &refused) {
		return status.Error(refused.code, refused.msg)
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case errors.Is(err, objstore.ErrAuth):
		code = codes.PermissionDenied
	case errors.Is(err, objstore.ErrNoBucket):
		code = codes.FailedPrecondition // the controller makes prefixes, not buckets
	case errors.Is(err, objstore.ErrUnavailable), errors.Is(err, objstore.ErrConflict):
		code = codes.Unavailable
	case errors.Is(err, objstore.ErrPrecondition):
		code = codes.Aborted // the record changed meanwhile: the CO retries
	case errors.Is(err, objstore.ErrInvalid):
		code = codes.InvalidArgument
	}
	var vals []string
	for _, k := range []string{SecretSecretAccessKey, SecretSessionToken, SecretAccessKeyID} {
		if v := secrets[k]; len(v) >= 4 {
			vals = append(vals, v)
		}
	}
	msg := redactAll(strings.Join(strings.Fields(err.Error()), " "), vals)
	return status.Errorf(code, "%s: %s", what, msg)
}
