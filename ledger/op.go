package ledger

// Op names the operation a record is about, as the ledger stores it (the
// "op" field). Every name a view, a sandbox or the ledger itself writes is
// declared here, once; readers compare against these constants, never
// against literals. The type is an open string, so a record of an older
// ledger reads whatever name it holds: before one name was used for both,
// a refused truncate was recorded as OpSetattr.
type Op string

// Looking: what a read-only request names.
const (
	OpLookup      Op = "lookup"
	OpGetattr     Op = "getattr"
	OpAccess      Op = "access"
	OpStatfs      Op = "statfs"
	OpStatx       Op = "statx"
	OpReadlink    Op = "readlink"
	OpOpendir     Op = "opendir"
	OpReaddir     Op = "readdir"
	OpReaddirplus Op = "readdirplus"
	OpGetxattr    Op = "getxattr"
	OpListxattr   Op = "listxattr"
)

// Opening, reading and writing content.
const (
	OpOpen          Op = "open"
	OpRead          Op = "read"
	OpPassthrough   Op = "passthrough"
	OpWrite         Op = "write"
	OpAppend        Op = "append"
	OpRewrite       Op = "rewrite"
	OpFlush         Op = "flush"
	OpFsync         Op = "fsync"
	OpFsyncdir      Op = "fsyncdir"
	OpRelease       Op = "release"
	OpLseek         Op = "lseek"
	OpGetlk         Op = "getlk"
	OpSetlk         Op = "setlk"
	OpSetlkw        Op = "setlkw"
	OpIoctl         Op = "ioctl"
	OpCopyFileRange Op = "copy_file_range"
)

// Changing an entry's attributes or extended attributes.
const (
	OpSetattr     Op = "setattr"
	OpTruncate    Op = "truncate"
	OpFallocate   Op = "fallocate"
	OpSetxattr    Op = "setxattr"
	OpRemovexattr Op = "removexattr"
)

// Making, removing and renaming names.
const (
	OpCreate  Op = "create"
	OpTmpfile Op = "tmpfile"
	OpMkdir   Op = "mkdir"
	OpMknod   Op = "mknod"
	OpSymlink Op = "symlink"
	OpLink    Op = "link"
	OpUnlink  Op = "unlink"
	OpRmdir   Op = "rmdir"
	OpRename  Op = "rename"
)

// A sandbox's connections (net_allowed, net_refused).
const (
	OpConnect Op = "connect"
	OpHTTP    Op = "http"
	OpSocks5  Op = "socks5"
)

// The ledger's own records: a turn of acpfs drive, and repairs.
const (
	OpTurn           Op = "turn"
	OpRestoreNewline Op = "restore_newline"
	OpCutForeign     Op = "cut_foreign"
)

// SetattrOp is the op of a setattr request: a truncate when it changes
// the size, so that a truncate is recorded under one name whether it is
// allowed or refused, by whichever layer refuses it.
func SetattrOp(changesSize bool) Op {
	if changesSize {
		return OpTruncate
	}
	return OpSetattr
}
