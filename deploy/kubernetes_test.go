package deploy

// The Kubernetes manifests of deploy/kubernetes, checked by a real
// kube-apiserver (integration/kubeserver, over its own etcd): every object
// passes a server-side apply in dry-run mode (schema, defaulting,
// validation and admission, nothing stored), the example's RBAC grants what
// `fencefs run --kubernetes-lease` asks for and no more, and the flags and
// attributes the manifests give fencefs are ones it takes.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/config"
	"github.com/fencefs/fencefs/csidriver"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/fencefs/fencefs/integration/kubeserver"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

const kubeDir = "kubernetes"

// manifest is one object of a file under deploy/kubernetes.
type manifest struct {
	file string
	obj  *unstructured.Unstructured
}

func (m manifest) String() string {
	return filepath.Base(m.file) + ": " + m.obj.GetKind() + " " + m.obj.GetName()
}

// loadManifests reads every object of every YAML file under deploy/kubernetes.
func loadManifests(t *testing.T) []manifest {
	t.Helper()
	var out []manifest
	err := filepath.WalkDir(kubeDir, func(path string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var obj map[string]any
			if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
				return nil
			} else if err != nil {
				return err
			}
			if len(obj) > 0 {
				out = append(out, manifest{file: path, obj: &unstructured.Unstructured{Object: obj}})
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no manifest under deploy/kubernetes")
	}
	return out
}

// kinds returns the objects of kind.
func kinds(ms []manifest, kind string) []manifest {
	var out []manifest
	for _, m := range ms {
		if m.obj.GetKind() == kind {
			out = append(out, m)
		}
	}
	return out
}

func TestKubernetesManifestsPassAServerSideDryRunApply(t *testing.T) {
	srv := kubeserver.ForTest(t)
	path, err := srv.Kubeconfig(kubeserver.Admin)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ms := loadManifests(t)

	// A dry run of a namespaced object needs its namespace to exist.
	for _, m := range kinds(ms, "Namespace") {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: m.obj.GetName()}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: %v", m, err)
		}
	}
	apply := func(m manifest, dryRun []string) error {
		gvk := m.obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return err
		}
		body, err := runtime.Encode(unstructured.UnstructuredJSONScheme, m.obj)
		if err != nil {
			return err
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if ns := m.obj.GetNamespace(); ns != "" {
			ri = dyn.Resource(mapping.Resource).Namespace(ns)
		}
		_, err = ri.Patch(ctx, m.obj.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "fencefs-deploy-test", DryRun: dryRun})
		return err
	}
	for _, m := range ms {
		if err := apply(m, []string{metav1.DryRunAll}); err != nil {
			t.Errorf("%s: server-side apply (dry run): %v", m, err)
		}
	}
	for _, want := range []string{"CSIDriver", "DaemonSet", "Deployment", "StorageClass", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "PersistentVolumeClaim", "StatefulSet", "Role", "RoleBinding", "Secret"} {
		if len(kinds(ms, want)) == 0 {
			t.Errorf("deploy/kubernetes has no %s", want)
		}
	}

	// The example's RBAC, stored for real, lets the application's
	// service account do what fencefs run does with its Lease, and no more.
	for _, m := range ms {
		if k := m.obj.GetKind(); k == "Role" || k == "RoleBinding" || k == "ServiceAccount" || k == "ClusterRole" || k == "ClusterRoleBinding" {
			if err := apply(m, nil); err != nil {
				t.Fatalf("%s: apply: %v", m, err)
			}
		}
	}
	checkProvisionerRBAC(ctx, t, cs, ms)

	sts := kinds(ms, "StatefulSet")[0].obj
	ns := sts.GetNamespace()
	sa, _, _ := unstructured.NestedString(sts.Object, "spec", "template", "spec", "serviceAccountName")
	lease := flagValue(t, containerArgs(t, sts, "app"), "--kubernetes-lease")
	for _, tc := range []struct {
		verb, name string
		allowed    bool
	}{
		{"create", "", true}, {"get", lease, true}, {"update", lease, true},
		{"update", "another-lease", false}, {"delete", lease, false}, {"list", "", false},
	} {
		r, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:" + ns + ":" + sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: tc.verb, Group: "coordination.k8s.io", Resource: "leases", Name: tc.name},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != tc.allowed {
			t.Errorf("service account %s/%s may %s lease %q: %v; want %v", ns, sa, tc.verb, tc.name, r.Status.Allowed, tc.allowed)
		}
	}
}

// checkProvisionerRBAC: the controller's service account may do what the
// external-provisioner does — PersistentVolumes made and deleted for
// claims, claims updated, its leader's Lease, the provisioner's Secret —
// and no more: no other Secret, no claim deleted, no pod.
func checkProvisionerRBAC(ctx context.Context, t *testing.T, cs *kubernetes.Clientset, ms []manifest) {
	t.Helper()
	dep := kinds(ms, "Deployment")[0].obj
	ns := dep.GetNamespace()
	sa, _, _ := unstructured.NestedString(dep.Object, "spec", "template", "spec", "serviceAccountName")
	var secret string
	for _, sc := range kinds(ms, "StorageClass") {
		params, _, _ := unstructured.NestedStringMap(sc.obj.Object, "parameters")
		if params["csi.storage.k8s.io/provisioner-secret-namespace"] == ns {
			secret = params["csi.storage.k8s.io/provisioner-secret-name"]
		}
	}
	if secret == "" {
		t.Fatalf("no StorageClass names a provisioner secret in the controller's namespace %s", ns)
	}
	for _, tc := range []struct {
		verb, group, resource, namespace, name string
		allowed                                bool
	}{
		{"create", "", "persistentvolumes", "", "", true},
		{"delete", "", "persistentvolumes", "", "pvc-1", true},
		{"watch", "", "persistentvolumeclaims", "", "", true},
		{"update", "", "persistentvolumeclaims", "fencefs-example", "provisioned", true},
		{"list", "storage.k8s.io", "storageclasses", "", "", true},
		{"create", "", "events", "fencefs-example", "", true},
		{"update", "coordination.k8s.io", "leases", ns, "csi-fencefs-io", true},
		{"get", "", "secrets", ns, secret, true},
		{"get", "", "secrets", ns, "another-secret", false},
		{"list", "", "secrets", ns, "", false},
		{"get", "", "secrets", "fencefs-example", "s3-credentials", false},
		{"delete", "", "persistentvolumeclaims", "fencefs-example", "provisioned", false},
		{"create", "", "pods", ns, "", false},
		{"update", "coordination.k8s.io", "leases", "fencefs-example", "example-leader", false},
	} {
		r, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:" + ns + ":" + sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: tc.namespace, Verb: tc.verb, Group: tc.group, Resource: tc.resource, Name: tc.name},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != tc.allowed {
			t.Errorf("service account %s/%s may %s %s %q in %q: %v; want %v", ns, sa, tc.verb, tc.resource, tc.name, tc.namespace, r.Status.Allowed, tc.allowed)
		}
	}
}

// containerArgs is the command and arguments of the container name of a
// workload's pod template.
func containerArgs(t *testing.T, obj *unstructured.Unstructured, name string) []string {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	for _, c := range cs {
		c := c.(map[string]any)
		if c["name"] != name {
			continue
		}
		var out []string
		for _, k := range []string{"command", "args"} {
			list, _, _ := unstructured.NestedStringSlice(c, k)
			out = append(out, list...)
		}
		return out
	}
	t.Fatalf("%s %s has no container %s", obj.GetKind(), obj.GetName(), name)
	return nil
}

// flagValue is the value of --name=VALUE in args.
func flagValue(t *testing.T, args []string, name string) string {
	t.Helper()
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	t.Fatalf("no %s= in %q", name, args)
	return ""
}

// helpFlags runs fencefs's help of command and returns its long flags.
func helpFlags(t *testing.T, bin string, command ...string) []string {
	t.Helper()
	out, err := exec.Command(bin, append(command, "--help")...).CombinedOutput()
	if err != nil {
		t.Fatalf("fencefs %s --help: %v\n%s", strings.Join(command, " "), err, out)
	}
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-[a-z], )?(--[a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags = append(flags, m[1])
	}
	return flags
}

// The manifests give fencefs only flags, driver names and volume
// attributes it takes: a renamed flag or option fails here, not in a
// cluster.
func TestKubernetesManifestsSpeakTheBinarysLanguage(t *testing.T) {
	bin := harness.Binary(t)
	ms := loadManifests(t)
	for _, tc := range []struct {
		kind, container string
		command         []string
	}{
		{"DaemonSet", "driver", []string{"csi"}},
		{"DaemonSet", "mounter", []string{"csi", "mounter"}},
		{"StatefulSet", "app", []string{"run"}},
		{"Deployment", "controller", []string{"csi"}},
	} {
		known := helpFlags(t, bin, tc.command...)
		obj := kinds(ms, tc.kind)[0].obj
		args := containerArgs(t, obj, tc.container)
		if i := slices.Index(args, tc.command[0]); i < 0 || !slices.Equal(args[i:min(i+len(tc.command), len(args))], tc.command) ||
			tc.container == "driver" && slices.Contains(args, "mounter") {
			t.Errorf("%s's container %s does not run fencefs %s: %q", tc.kind, tc.container, strings.Join(tc.command, " "), args)
		}
		for _, a := range args {
			if a == "--" {
				break
			}
			if f, _, _ := strings.Cut(a, "="); strings.HasPrefix(f, "--") && !slices.Contains(known, f) {
				t.Errorf("%s's container %s gives fencefs %s the flag %s, which it does not take", tc.kind, tc.container, strings.Join(tc.command, " "), f)
			}
		}
	}

	if got := kinds(ms, "CSIDriver")[0].obj.GetName(); got != csidriver.Name {
		t.Errorf("the CSIDriver is %q; the driver calls itself %q", got, csidriver.Name)
	}
	reg := strings.Join(containerArgs(t, kinds(ms, "DaemonSet")[0].obj, "node-driver-registrar"), " ")
	if !strings.Contains(reg, "/plugins/"+csidriver.Name+"/csi.sock") {
		t.Errorf("the registrar's registration path does not name the driver's directory: %s", reg)
	}
	// The controller serves the socket its provisioner calls, with the
	// flags of the Controller service.
	dep := kinds(ms, "Deployment")[0].obj
	cargs := containerArgs(t, dep, "controller")
	if !slices.Contains(cargs, "--controller") || flagValue(t, cargs, "--s3-endpoint") == "" {
		t.Errorf("the Deployment's controller is not fencefs csi --controller --s3-endpoint=…: %q", cargs)
	}
	if ep, addr := flagValue(t, cargs, "--endpoint"), flagValue(t, containerArgs(t, dep, "csi-provisioner"), "--csi-address"); ep != "unix://"+addr {
		t.Errorf("the provisioner calls %s; the controller serves %s", addr, ep)
	}
	options := map[string]bool{csidriver.AttrBucket: true, csidriver.AttrAuthenticationSource: true, csidriver.AttrTokenAudience: true}
	for _, s := range config.Settings() {
		if s.Option != "" {
			options[s.Option] = true
		}
	}
	for _, m := range kinds(ms, "PersistentVolume") {
		if d, _, _ := unstructured.NestedString(m.obj.Object, "spec", "csi", "driver"); d != csidriver.Name {
			t.Errorf("%s: driver %q; want %q", m, d, csidriver.Name)
		}
		attrs, _, _ := unstructured.NestedStringMap(m.obj.Object, "spec", "csi", "volumeAttributes")
		if attrs[csidriver.AttrBucket] == "" {
			t.Errorf("%s: no %s attribute", m, csidriver.AttrBucket)
		}
		flags, _, _ := unstructured.NestedStringSlice(m.obj.Object, "spec", "mountOptions")
		for _, f := range flags {
			name, _, _ := strings.Cut(f, "=")
			attrs[name] = f
		}
		for k := range attrs {
			if !options[k] {
				t.Errorf("%s: %s is neither %s nor a fencefs -o option", m, k, csidriver.AttrBucket)
			}
		}
	}
	// A StorageClass's parameters are the controller's, the CO's
	// (csi.storage.k8s.io/…) or fencefs -o options, and make a volume.
	for _, m := range kinds(ms, "StorageClass") {
		if p, _, _ := unstructured.NestedString(m.obj.Object, "provisioner"); p != csidriver.Name {
			t.Errorf("%s: provisioner %q; want %q", m, p, csidriver.Name)
		}
		params, _, _ := unstructured.NestedStringMap(m.obj.Object, "parameters")
		for k := range params {
			if !options[k] && k != csidriver.ParamPrefix && k != csidriver.ParamOnDelete && k != csidriver.ParamBucketPerVolume && !strings.HasPrefix(k, "csi.storage.k8s.io/") {
				t.Errorf("%s: parameter %s is neither the controller's nor a fencefs -o option", m, k)
			}
		}
		if err := csidriver.CheckClassParameters(params); err != nil {
			t.Errorf("%s: the controller refuses its parameters: %v", m, err)
		}
	}
}

// container is the container name of a workload's pod template.
func container(t *testing.T, obj *unstructured.Unstructured, name string) map[string]any {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	for _, c := range cs {
		if c := c.(map[string]any); c["name"] == name {
			return c
		}
	}
	t.Fatalf("%s %s has no container %s", obj.GetKind(), obj.GetName(), name)
	return nil
}

// volumeAt is the name of the volume container c mounts at path, and its
// mount propagation ("" when none is given).
func volumeAt(c map[string]any, path string) (name, propagation string) {
	mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
	for _, m := range mounts {
		m := m.(map[string]any)
		if m["mountPath"] == path {
			name, _ = m["name"].(string)
			propagation, _ = m["mountPropagation"].(string)
			return name, propagation
		}
	}
	return "", ""
}

// The node plugin's pod runs the mounts in the mounter's container, not
// the driver's (csidriver's TestADriverContainerRestartLeaves… tests
// that shape): the two share the mounter's socket, the node's state
// directory and kubelet's, and one process namespace; only the mounter
// mounts, so only it is privileged with Bidirectional propagation.
func TestTheNodePluginRunsTheMountsInTheMounterContainer(t *testing.T) {
	ds := kinds(loadManifests(t), "DaemonSet")[0].obj
	spec := func(path ...string) any {
		v, _, _ := unstructured.NestedFieldNoCopy(ds.Object, append([]string{"spec"}, path...)...)
		return v
	}
	if spec("template", "spec", "shareProcessNamespace") != true {
		t.Error("the pod does not share its process namespace: the driver would not see the mount processes")
	}
	if spec("updateStrategy", "type") != "OnDelete" {
		t.Errorf("updateStrategy %v; want OnDelete (an update replaces the pod and stops every volume of the node)", spec("updateStrategy", "type"))
	}
	volumes := map[string]map[string]any{}
	vs, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "volumes")
	for _, v := range vs {
		v := v.(map[string]any)
		volumes[v["name"].(string)] = v
	}
	driver, mounter := container(t, ds, "driver"), container(t, ds, "mounter")
	dargs, margs := containerArgs(t, ds, "driver"), containerArgs(t, ds, "mounter")
	sock := flagValue(t, dargs, "--mounter-socket")
	if got := flagValue(t, margs, "--socket"); got != sock {
		t.Errorf("the driver asks the mounter at %s; the mounter serves at %s", sock, got)
	}
	for _, tc := range []struct {
		what, path              string
		volumeKind              string
		driverProp, mounterProp string
		driverFlag, mounterFlag string
		needsDriver             bool
	}{
		{"the mounter's socket", filepath.Dir(sock), "emptyDir", "", "", "", "", true},
		{"the state directory", flagValue(t, dargs, "--state-dir"), "hostPath", "", "", "--state-dir", "--state-dir", true},
		{"kubelet's directory", flagValue(t, dargs, "--kubelet-dir"), "hostPath", "HostToContainer", "Bidirectional", "--kubelet-dir", "--kubelet-dir", true},
		{"/dev/fuse", "/dev/fuse", "hostPath", "", "", "", "", false},
	} {
		mv, mprop := volumeAt(mounter, tc.path)
		dv, dprop := volumeAt(driver, tc.path)
		switch {
		case mv == "" || volumes[mv][tc.volumeKind] == nil:
			t.Errorf("%s: the mounter has no %s volume at %s", tc.what, tc.volumeKind, tc.path)
		case tc.needsDriver && dv != mv:
			t.Errorf("%s: the driver mounts volume %q at %s, the mounter %q", tc.what, dv, tc.path, mv)
		case !tc.needsDriver && dv != "":
			t.Errorf("%s: the driver mounts it, but mounts nothing itself", tc.what)
		case mprop != tc.mounterProp || dprop != tc.driverProp:
			t.Errorf("%s: propagation %q in the mounter, %q in the driver; want %q and %q", tc.what, mprop, dprop, tc.mounterProp, tc.driverProp)
		}
		if tc.mounterFlag != "" && flagValue(t, margs, tc.mounterFlag) != flagValue(t, dargs, tc.driverFlag) {
			t.Errorf("%s: the mounter's %s is not the driver's %s", tc.what, tc.mounterFlag, tc.driverFlag)
		}
	}
	if p, _, _ := unstructured.NestedBool(mounter, "securityContext", "privileged"); !p {
		t.Error("the mounter is not privileged: it cannot mount with Bidirectional propagation")
	}
	if p, _, _ := unstructured.NestedBool(driver, "securityContext", "privileged"); p {
		t.Error("the driver is privileged: it mounts nothing")
	}
}
