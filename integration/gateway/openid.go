package gateway

// MinIO as the STS of an OpenID provider (a kube-apiserver's service
// account issuer, in the tests): the role ARN it gives the provider, and
// a wait until it exchanges tokens.

import (
	"context"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"net/http"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
)

// MinIORoleARN is the role ARN MinIO gives an OpenID provider configured
// with a role policy (MINIO_IDENTITY_OPENID_ROLE_POLICY):
// arn:minio:iam:REGION::role/ followed by the unpadded base64url SHA-1 of
// the client ID (MinIO's internal/config/identity/openid, LookupConfig).
func MinIORoleARN(region, clientID string) string {
	h := sha1.Sum([]byte(clientID))
	return "arn:minio:iam:" + region + "::role/" + base64.RawURLEncoding.EncodeToString(h[:])
}

// WaitWebIdentity waits (20 s at most, or ctx) until the server's STS
// exchanges token for credentials of role: MinIO loads its IAM subsystem,
// and with it the OpenID provider's discovery document and JWKS, in the
// background after it starts serving S3, and retries a provider it could
// not reach.
func (g *Gateway) WaitWebIdentity(ctx context.Context, token, role string) error {
	p := &credentials.STSWebIdentity{
		Client:      &http.Client{Timeout: 5 * time.Second},
		STSEndpoint: g.Endpoint,
		RoleARN:     role,
		GetWebIDTokenExpiry: func() (*credentials.WebIdentityToken, error) {
			return &credentials.WebIdentityToken{Token: token}, nil
		},
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		_, err := p.Retrieve()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the STS of %s does not exchange the token: %v", g.Endpoint, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
