package s3

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
	"github.com/minio/minio-go/v7/pkg/signer"
)

// emptySHA256 is the hex SHA-256 of an empty body.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// raw sends one signed request without a body for the requests minio-go
// cannot shape (DELETE with If-Match, ListObjectsV2 with a context). It
// returns the response of a 2xx answer (the caller closes its body), or a
// classified error.
func (s *Store) raw(ctx context.Context, method, key string, query url.Values, hdr http.Header) (*http.Response, error) {
	req, err := s.signedRequest(ctx, method, key, query, hdr, nil, 0, emptySHA256)
	if err != nil {
		return nil, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, s.classify(err, strings.ToLower(method), key)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	er := minio.ErrorResponse{}
	if len(body) > 0 {
		_ = xml.Unmarshal(body, &er)
	}
	er.StatusCode = resp.StatusCode
	if er.Code == "" {
		switch resp.StatusCode {
		case http.StatusNotFound:
			er.Code = "NoSuchKey"
		case http.StatusPreconditionFailed:
			er.Code = "PreconditionFailed"
		}
	}
	return nil, s.classifyResponse(er, fmt.Sprintf("s3 %s %s/%s", strings.ToLower(method), s.cfg.Bucket, key))
}

// signedRequest builds a request of key (the bucket when "") carrying
// body (nil: none) of size bytes whose hex SHA-256 is sha, signed.
func (s *Store) signedRequest(ctx context.Context, method, key string, query url.Values, hdr http.Header, body io.Reader, size int64, sha string) (*http.Request, error) {
	u := *s.endpoint
	switch {
	case (s.cfg.PathStyle || !s3utils.IsAmazonEndpoint(*s.endpoint)) && key == "":
		u.Path = "/" + s.cfg.Bucket
	case s.cfg.PathStyle || !s3utils.IsAmazonEndpoint(*s.endpoint):
		u.Path = "/" + s.cfg.Bucket + "/" + key
		u.RawPath = "/" + s.cfg.Bucket + "/" + s3utils.EncodePath(key)
	default:
		u.Host = s.cfg.Bucket + "." + u.Host
		u.Path = "/" + key
		u.RawPath = "/" + s3utils.EncodePath(key)
	}
	if len(query) > 0 {
		u.RawQuery = s3utils.QueryEncode(query)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, &opError{sentinel: objstore.ErrInvalid, msg: fmt.Sprintf("s3 %s %s: %v", method, key, err), certain: true}
	}
	if body != nil {
		req.ContentLength = size
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("X-Amz-Content-Sha256", sha)
	v, err := s.creds.GetWithContext(&credentials.CredContext{Client: s.http, Context: ctx})
	if err != nil {
		var re *retrievalError
		if !errors.As(err, &re) {
			re = &retrievalError{source: s.credsFrom, err: err}
		}
		return nil, s.classify(re, strings.ToLower(method), key)
	}
	if v.AccessKeyID != "" {
		req = signer.SignV4(*req, v.AccessKeyID, v.SecretAccessKey, v.SessionToken, s.cfg.Region)
	}
	return req, nil
}

// Delete implements objstore.Store with a signed DELETE carrying If-Match.
// Without a condition a missing key is not an error. With If-Match, a
// missing key succeeds on the Versity gateway (nothing to delete); a server
// answering 404 or 412 instead gives ErrPrecondition. If-Match of another
// ETag is ErrPrecondition; If-None-Match is ErrInvalid. A backend that
// ignores If-Match on DELETE deletes anyway (objstore.Probe detects it).
func (s *Store) Delete(ctx context.Context, key string, cond objstore.Condition) error {
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	if err := objstore.ValidateCond(cond); err != nil {
		return err
	}
	if cond.IfNoneMatch {
		return fmt.Errorf("delete %q: If-None-Match is meaningless on DELETE: %w", key, objstore.ErrInvalid)
	}
	hdr := http.Header{}
	if cond.IfMatch != "" {
		hdr.Set("If-Match", `"`+objstore.NormalizeETag(cond.IfMatch)+`"`)
	}
	return s.call(ctx, "delete", true, func(ctx context.Context) error {
		resp, err := s.raw(ctx, http.MethodDelete, key, nil, hdr)
		if err != nil {
			if cond.IfMatch == "" && errors.Is(err, objstore.ErrNotFound) {
				return nil
			}
			return asPrecondition(err, cond)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil
	})
}

// listV2Result is the ListObjectsV2 response.
type listV2Result struct {
	IsTruncated           bool
	NextContinuationToken string
	EncodingType          string
	Contents              []listedObject
	CommonPrefixes        []struct{ Prefix string }
}

// listedObject is one object of a listing. UserMetadata and Internal are
// MinIO's extension (metadata=true): each element of UserMetadata is one
// stored key as MinIO keeps it ("X-Amz-Meta-Mode", "content-type"), and
// Internal (the object's erasure layout) is there whenever the caller may
// read the object, also when it has no metadata to list.
type listedObject struct {
	Key          string
	Size         int64
	ETag         string
	LastModified string
	UserMetadata *struct {
		Items []struct {
			XMLName xml.Name
			Value   string `xml:",chardata"`
		} `xml:",any"`
	}
	Internal *struct{}
}

// entry is the objstore.Entry of a listed object whose key is already
// decoded. An object listed with its metadata gets Meta (the user keys,
// lower-cased, without "x-amz-meta-", as Stat gives them), ContentType, and
// LastModified to the second, as a HEAD's Last-Modified says it.
func (c listedObject) entry(key string) objstore.Entry {
	e := objstore.Entry{Key: key, Size: c.Size, ETag: objstore.NormalizeETag(c.ETag)}
	e.LastModified, _ = parseISOTime(c.LastModified)
	if c.UserMetadata == nil && c.Internal == nil {
		return e
	}
	e.Meta = map[string]string{}
	e.LastModified = e.LastModified.Truncate(time.Second)
	if c.UserMetadata == nil {
		return e
	}
	for _, it := range c.UserMetadata.Items {
		k := strings.ToLower(it.XMLName.Local)
		switch {
		case strings.HasPrefix(k, "x-amz-meta-"):
			e.Meta[k[len("x-amz-meta-"):]] = it.Value
		case k == "content-type":
			e.ContentType = it.Value
		}
	}
	return e
}

// List implements objstore.Store with ListObjectsV2 (URL-encoded keys),
// merging each page's objects and common prefixes into lexical order.
func (s *Store) List(ctx context.Context, prefix, delim string, fn func(objstore.Entry) error) error {
	return s.list(ctx, prefix, delim, false, fn)
}

// ListMeta implements objstore.Store: List asking for each object's
// metadata (metadata=true, MinIO's extension of ListObjectsV2; a store
// without it ignores the parameter and its entries carry none).
func (s *Store) ListMeta(ctx context.Context, prefix, delim string, fn func(objstore.Entry) error) error {
	return s.list(ctx, prefix, delim, true, fn)
}

func (s *Store) list(ctx context.Context, prefix, delim string, meta bool, fn func(objstore.Entry) error) error {
	token := ""
	for {
		q := url.Values{}
		q.Set("list-type", "2")
		q.Set("encoding-type", "url")
		q.Set("max-keys", strconv.Itoa(s.cfg.ListPageSize))
		q.Set("prefix", prefix)
		if delim != "" {
			q.Set("delimiter", delim)
		}
		if meta {
			q.Set("metadata", "true")
		}
		if token != "" {
			q.Set("continuation-token", token)
		}
		var page listV2Result
		err := s.call(ctx, "list", false, func(ctx context.Context) error {
			resp, err := s.raw(ctx, http.MethodGet, "", q, nil)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			page = listV2Result{}
			if err := xml.NewDecoder(resp.Body).Decode(&page); err != nil {
				return s.classify(fmt.Errorf("decoding the listing: %w", err), "list", prefix)
			}
			return nil
		})
		if err != nil {
			return err
		}
		dec := func(k string) (string, error) {
			if page.EncodingType != "url" {
				return k, nil
			}
			d, err := url.QueryUnescape(k)
			if err != nil {
				return "", &opError{sentinel: objstore.ErrUnavailable, msg: fmt.Sprintf("s3 list %s: bad key encoding %q", prefix, k)}
			}
			return d, nil
		}
		entries := make([]objstore.Entry, 0, len(page.Contents)+len(page.CommonPrefixes))
		for _, c := range page.Contents {
			k, err := dec(c.Key)
			if err != nil {
				return err
			}
			entries = append(entries, c.entry(k))
		}
		for _, p := range page.CommonPrefixes {
			k, err := dec(p.Prefix)
			if err != nil {
				return err
			}
			entries = append(entries, objstore.Entry{Key: k, IsPrefix: true})
		}
		sort.SliceStable(entries, func(i, j int) bool { return entries[i].Key < entries[j].Key })
		for _, e := range entries {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(e); err != nil {
				return err
			}
		}
		if !page.IsTruncated {
			return nil
		}
		if page.NextContinuationToken == "" {
			return &opError{sentinel: objstore.ErrUnavailable, msg: fmt.Sprintf("s3 list %s: truncated listing without a continuation token", prefix)}
		}
		token = page.NextContinuationToken
	}
}

// ListUploads implements objstore.Store with ListMultipartUploads.
func (s *Store) ListUploads(ctx context.Context, prefix string, fn func(objstore.Upload) error) error {
	keyMarker, idMarker := "", ""
	for {
		var res minio.ListMultipartUploadsResult
		err := s.call(ctx, "list_uploads", false, func(ctx context.Context) error {
			var err error
			res, err = s.core.ListMultipartUploads(ctx, s.cfg.Bucket, prefix, keyMarker, idMarker, "", 1000)
			return s.classify(err, "list uploads", prefix)
		})
		if err != nil {
			return err
		}
		for _, u := range res.Uploads {
			if err := fn(objstore.Upload{Key: u.Key, UploadID: u.UploadID, Initiated: u.Initiated}); err != nil {
				return err
			}
		}
		if !res.IsTruncated {
			return nil
		}
		if res.NextKeyMarker == keyMarker && res.NextUploadIDMarker == idMarker {
			return &opError{sentinel: objstore.ErrUnavailable, msg: fmt.Sprintf("s3 list uploads %s: truncated listing does not advance", prefix)}
		}
		keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
	}
}

// AbortUpload implements objstore.Store. An unknown upload is ErrNotFound.
func (s *Store) AbortUpload(ctx context.Context, key, uploadID string) error {
	return s.call(ctx, "abort", true, func(ctx context.Context) error {
		return s.classify(s.core.AbortMultipartUpload(ctx, s.cfg.Bucket, key, uploadID), "abort upload", key)
	})
}

// DeleteMany implements objstore.Store with DeleteObjects requests (up to
// 1000 keys each, sent by minio-go).
func (s *Store) DeleteMany(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if err := objstore.ValidateKey(k); err != nil {
			return err
		}
	}
	for len(keys) > 0 {
		batch := keys[:min(len(keys), 1000)]
		keys = keys[len(batch):]
		err := s.call(ctx, "delete_many", true, func(ctx context.Context) error {
			ch := make(chan minio.ObjectInfo, len(batch))
			for _, k := range batch {
				ch <- minio.ObjectInfo{Key: k}
			}
			close(ch)
			var errs []error
			for r := range s.core.RemoveObjectsWithResult(ctx, s.cfg.Bucket, ch, minio.RemoveObjectsOptions{}) {
				if r.Err != nil {
					if e := s.classify(r.Err, "delete", r.ObjectName); !errors.Is(e, objstore.ErrNotFound) {
						errs = append(errs, e)
					}
				}
			}
			if len(errs) > 0 {
				return errs[0] // classified: call decides on a retry
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
