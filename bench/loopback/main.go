// Command loopback mounts a plain go-fuse loopback of a directory: the
// anchor the benchmarks compare acpfs with. It is the loopback exactly as
// go-fuse ships it (fs.NewLoopbackRoot, and the options fs.Mount applies
// when given nil: one-second entry and attribute timeouts, twelve
// background requests), except that it mounts directly, as root, because
// fusermount3 may be absent. With -allow-other, other uids may use the
// mount and the kernel checks their permissions (default_permissions),
// as with acpfs mount --allow-other; the conformance run needs it.
//
// With -keep, the kernel keeps everything a loopback may let it keep:
// entries and attributes for an hour, listings (FOPEN_CACHE_DIR) and
// pages (FOPEN_KEEP_CACHE) between opens, and no flush at close
// (FOPEN_NOFLUSH). What is left of a warm `grep -r` is then one round
// trip per open and opendir: the floor of any filesystem whose daemon
// answers each open.
//
// Usage: loopback [-no-passthrough] [-allow-other] [-keep] ORIG MOUNTPOINT
//
// It prints "ready" once the kernel serves the mount and unmounts on
// SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	noPassthrough := flag.Bool("no-passthrough", false, "disable FUSE passthrough, so every read reaches the daemon")
	allowOther := flag.Bool("allow-other", false, "let other uids use the mount (with default_permissions, as acpfs --allow-other)")
	keep := flag.Bool("keep", false, "let the kernel keep entries, attributes, listings and pages, and skip the flush at close")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: loopback [-no-passthrough] [-allow-other] [-keep] ORIG MOUNTPOINT")
		os.Exit(2)
	}
	root, err := fs.NewLoopbackRoot(flag.Arg(0))
	if err != nil {
		log.Fatalf("loopback root %s: %v", flag.Arg(0), err)
	}
	// The same values fs.Mount and fuse.NewServer use for nil options;
	// only DirectMount is added.
	sec := time.Second
	if *keep {
		sec = time.Hour
		lr := root.(*fs.LoopbackNode).RootData
		lr.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
			return &keepNode{LoopbackNode: fs.LoopbackNode{RootData: r}}
		}
		root = lr.NewNode(lr, nil, "", nil)
		lr.RootNode = root
	}
	opts := &fs.Options{
		EntryTimeout: &sec,
		AttrTimeout:  &sec,
		MountOptions: fuse.MountOptions{
			MaxBackground: 12,
			DirectMount:   os.Geteuid() == 0,
			FsName:        flag.Arg(0),
			Name:          "loopback",
		},
	}
	if *noPassthrough {
		opts.MountOptions.DisabledCapabilities = fuse.CAP_PASSTHROUGH
	}
	if *allowOther {
		opts.MountOptions.AllowOther = true
		opts.MountOptions.Options = append(opts.MountOptions.Options, "default_permissions")
	}
	// The handler is installed before mounting: a signal that arrives
	// while the mount comes up waits for it and then unmounts, instead
	// of killing the process with the mount half set up.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	server, err := fs.Mount(flag.Arg(1), root, opts)
	if err != nil {
		log.Fatalf("mount %s: %v", flag.Arg(1), err)
	}
	fmt.Println("ready")
	go func() {
		<-sig
		for i := 0; i < 20; i++ {
			if err := server.Unmount(); err == nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = syscall.Unmount(flag.Arg(1), syscall.MNT_DETACH)
		os.Exit(1)
	}()
	server.Wait()
}

// keepNode is a loopback node whose opens let the kernel keep what it
// has (see -keep).
type keepNode struct{ fs.LoopbackNode }

func (n *keepNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	return fh, fl | fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH, errno
}

func (n *keepNode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	return fh, fl | fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE, errno
}
