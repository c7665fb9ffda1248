package s3

import (
	"encoding/xml"
	"fmt"
	"testing"
)

// A page of MinIO's ListObjectsV2 with metadata=true, as the pinned server
// sends it: user keys as "X-Amz-Meta-<Canonical>", the content type as
// "content-type", Internal whenever the caller may read the object (also
// without user metadata), nothing for one it may not.
const minioMetaPage = `<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>d/</Prefix><KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>` +
	`<Contents><Key>d/a</Key><LastModified>2026-12-01T20:30:01.699Z</LastModified><ETag>&#34;764efa883dda1e11db47671c4a3bbd9e&#34;</ETag><Size>3</Size><StorageClass>STANDARD</StorageClass><UserMetadata><X-Amz-Meta-Mtime>1700000000.5</X-Amz-Meta-Mtime><content-type>binary/octet-stream</content-type><X-Amz-Meta-Mode>33188</X-Amz-Meta-Mode><X-Amz-Meta-Fencefs-Epoch>17</X-Amz-Meta-Fencefs-Epoch></UserMetadata><UserTags>fencefs-tombstone=1</UserTags><Internal><K>1</K><M>0</M></Internal></Contents>` +
	`<Contents><Key>d/plain</Key><LastModified>2026-12-01T20:30:03.344Z</LastModified><ETag>&#34;764efa883dda1e11db47671c4a3bbd9e&#34;</ETag><Size>3</Size><StorageClass>STANDARD</StorageClass><Internal><K>1</K><M>0</M></Internal></Contents>` +
	`<Contents><Key>d/secret</Key><LastModified>2026-12-01T20:30:04.000Z</LastModified><ETag>&#34;aa&#34;</ETag><Size>9</Size><StorageClass>STANDARD</StorageClass></Contents>` +
	`<EncodingType>url</EncodingType></ListBucketResult>`

func TestListedObjectsBecomeEntriesWithWhatAHeadSays(t *testing.T) {
	var page listV2Result
	if err := xml.Unmarshal([]byte(minioMetaPage), &page); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range page.Contents {
		e := c.entry(c.Key)
		got = append(got, fmt.Sprintf("%s %d %s %s %v %q", e.Key, e.Size, e.ETag, e.LastModified.Format("15:04:05.000"), e.Meta, e.ContentType))
	}
	want := []string{
		`d/a 3 764efa883dda1e11db47671c4a3bbd9e 20:30:01.000 map[fencefs-epoch:17 mode:33188 mtime:1700000000.5] "binary/octet-stream"`,
		`d/plain 3 764efa883dda1e11db47671c4a3bbd9e 20:30:03.000 map[] ""`,
		`d/secret 9 aa 20:30:04.000 map[] ""`,
	}
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Errorf("entry %d = %s\nwant        %s", i, got[i], want[i])
		}
	}
	if page.Contents[2].entry("d/secret").Meta != nil {
		t.Errorf("an object listed without metadata (no UserMetadata, no Internal) got Meta; want nil: a HEAD must tell")
	}
}
