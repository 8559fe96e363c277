// Files PhaseKV reads and writes, opened so that a hostile or unlucky path cannot hurt:
//
//  - inputs are regular files, checked before and after opening (a FIFO never blocks the
//    open, a device or socket is refused, naming what it is);
//  - outputs are written to a temporary file created exclusively next to the target (a
//    unique name per writer, O_EXCL: it never follows a planted symlink, never writes through
//    a hard link, never takes an existing file), flushed to disk and renamed over the target,
//    which must be a regular file or absent; a failure or a signal leaves no temporary behind
//    and the previous file as it was.
//
// Paths in messages are shown through display_escape() (control bytes escaped).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "status.h"

namespace phasekv {

// "a directory", "a FIFO", "a socket", "a character device", "a block device", "a symbolic
// link", "a regular file" or "a special file" for a stat mode.
const char* file_kind_name(mode_t mode);

// `s` with control characters (C0, DEL, C1) and bytes that are not valid UTF-8 written as \n,
// \t, \r or \xNN, so a file name or a string from a file cannot move the cursor, clear the
// terminal or forge a line when printed. Valid UTF-8 text without controls passes unchanged,
// and so does its output: escaping twice changes nothing. keep_newlines leaves '\n' as is
// (for a message of several lines, once its parts are escaped).
std::string display_escape(const std::string& s, bool keep_newlines = false);

// Opens `path` for reading. `what` names the input in messages ("model", "GGUF", "--gates").
// Refused with kIoError: a missing or unreadable path, anything but a regular file (checked
// with stat before opening, so a FIFO or device is never opened, and again with fstat on the
// descriptor, which was opened O_NONBLOCK so a FIFO swapped in between cannot block).
// On success *fd is a blocking, close-on-exec descriptor the caller closes.
Status open_regular_file(const std::string& path, const char* what, int* fd, uint64_t* size);

// Whether two paths name the same existing file (same device and inode: symlinks, `..` and
// hard links all resolve to it). False when either does not exist.
bool same_file(const std::string& a, const std::string& b);

// An output written whole or not at all (see the top of this file).
class AtomicFile {
 public:
  AtomicFile() = default;
  ~AtomicFile();  // discards an uncommitted temporary
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Checks the target and creates the temporary file "<path>.partial.XXXXXX" (mode 0666 less
  // the umask, as a file the user creates). A `path` that is a symbolic link to a regular file
  // is written at the link's target, so the link stays. Refused with kIoError, naming `what`
  // and the path: an existing target that is not a regular file (a directory, FIFO, device,
  // socket, or a link to one), a dangling link, a missing or unwritable directory; refused
  // with kInvalidArgument when the target exists and `replace` is false.
  Status open(const std::string& path, const char* what, bool replace);

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }       // where the file will appear
  const std::string& temp_path() const { return tmp_; }

  // pwrite of all `size` bytes at `offset` (retries short writes and EINTR).
  Status write_at(const void* data, uint64_t size, uint64_t offset);
  // Appends at the current end of what write() wrote so far.
  Status write(const void* data, uint64_t size);

  // fsync, then renames the temporary over the target (the target is checked again: still a
  // regular file or absent) and syncs the directory. Without `replace`, the rename refuses to
  // take a target that appeared meanwhile (another writer finished first): kInvalidArgument,
  // the other writer's file kept. After any failure the temporary is removed.
  Status commit();
  // Removes the temporary (idempotent).
  void discard();

 private:
  std::string path_, tmp_, what_;
  bool replace_ = false;
  int fd_ = -1;
  int slot_ = -1;  // in the registry remove_pending_temporaries() reads
  uint64_t end_ = 0;
};

// Writes `data` to `path` as an AtomicFile (replacing a regular file).
Status write_file_atomic(const std::string& path, const char* what, const std::string& data);

// Unlinks every temporary file of an AtomicFile not yet committed or discarded in this
// process. Async-signal-safe: a program's SIGINT/SIGTERM/SIGHUP handler calls it before
// re-raising the signal, so a killed writer leaves no temporary behind. (The registry it
// reads is process-wide by nature; the library installs no handler itself.)
void remove_pending_temporaries();

}  // namespace phasekv
