package fencing

import (
	"bytes"

	"github.com/fencefs/fencefs/objstore/memstore"
)

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

func newMem() *memstore.Store { return memstore.New() }
