package gateway

// MinIO users for the credential tests: the few admin API calls that
// `mc admin user add`, `mc admin policy attach` and `mc admin user remove`
// send, signed with the root keys. madmin-go (MinIO's admin client) is not
// a dependency: its one non-trivial part, the encrypted body of add-user,
// is madmin.EncryptData's format, written out below.

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/minio/minio-go/v7/pkg/signer"
)

// ErrNotMinIO is returned by the user calls on a server that is not MinIO.
var ErrNotMinIO = errors.New("users can only be managed on MinIO")

// AddUser creates (or updates) the MinIO user accessKey with secretKey and
// attaches the canned policy (readwrite, readonly, …).
func (g *Gateway) AddUser(ctx context.Context, accessKey, secretKey, policy string) error {
	body, err := json.Marshal(map[string]string{"secretKey": secretKey, "status": "enabled"})
	if err != nil {
		return err
	}
	enc, err := encryptAdminData(g.SecretKey, body)
	if err != nil {
		return err
	}
	if err := g.admin(ctx, http.MethodPut, "add-user", url.Values{"accessKey": {accessKey}}, enc); err != nil {
		return err
	}
	return g.admin(ctx, http.MethodPut, "set-user-or-group-policy",
		url.Values{"policyName": {policy}, "userOrGroup": {accessKey}, "isGroup": {"false"}}, nil)
}

// RemoveUser deletes the MinIO user accessKey: its keys, and the temporary
// credentials derived from them, are refused from then on.
func (g *Gateway) RemoveUser(ctx context.Context, accessKey string) error {
	return g.admin(ctx, http.MethodDelete, "remove-user", url.Values{"accessKey": {accessKey}}, nil)
}

// admin sends one admin API request signed with the root keys.
func (g *Gateway) admin(ctx context.Context, method, call string, query url.Values, body []byte) error {
	if g.Kind != MinIO && g.Kind != MinIOErasure {
		return ErrNotMinIO
	}
	u := g.Endpoint + "/minio/admin/v3/" + call + "?" + query.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	req.ContentLength = int64(len(body))
	req = signer.SignV4(*req, g.AccessKey, g.SecretKey, "", g.Region)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return fmt.Errorf("minio admin %s: HTTP %d: %s", call, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}

// encryptAdminData is madmin.EncryptData with its PBKDF2 + AES-256-GCM
// choice (algorithm id 2, which every MinIO server decrypts):
// salt(32) | id(1) | nonce(8) | a sio-go stream of the data. A body under
// 16 KiB is one final fragment, sealed with the nonce nonce|LE32(1) and the
// associated data 0x80|tag, where tag seals nothing with nonce|LE32(0).
func encryptAdminData(password string, data []byte) ([]byte, error) {
	if len(data) >= 1<<14 {
		return nil, errors.New("admin body too large for one fragment")
	}
	salt := make([]byte, 32)
	nonce := make([]byte, 8)
	if _, err := rand.Read(salt); err != nil {
		return nil, err
	}
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	key, err := pbkdf2.Key(sha256.New, password, salt, 8192, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	n := make([]byte, aead.NonceSize())
	copy(n, nonce)
	ad := append([]byte{0x00}, aead.Seal(nil, n, nil, nil)...)
	ad[0] = 0x80
	binary.LittleEndian.PutUint32(n[len(n)-4:], 1)
	out := append(append(append([]byte{}, salt...), 2), nonce...)
	return aead.Seal(out, n, data, ad), nil
}

// AddPolicy creates (or replaces) the MinIO policy name with the policy
// document doc (`mc admin policy create`).
func (g *Gateway) AddPolicy(ctx context.Context, name, doc string) error {
	return g.admin(ctx, http.MethodPut, "add-canned-policy", url.Values{"name": {name}}, []byte(doc))
}
