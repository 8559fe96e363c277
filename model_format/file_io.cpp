#include "file_io.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "utf8.h"

namespace phasekv {

namespace {

// Temporaries not yet committed, for remove_pending_temporaries(). A signal handler may read
// the registry at any moment: a slot's path is complete before its state says "armed", and
// std::atomic<int> is lock-free, so reading it is async-signal-safe. Sixteen writers at once
// is more than any command has; a seventeenth still works, only without the signal cleanup.
constexpr int kSlots = 16;
constexpr size_t kSlotPath = 4096;
constexpr int kFree = 0, kClaimed = 1, kArmed = 2;
struct Slot {
  std::atomic<int> state{kFree};
  char path[kSlotPath];
};
Slot g_slots[kSlots];
static_assert(ATOMIC_INT_LOCK_FREE == 2, "the signal handler needs a lock-free atomic int");

int arm_slot(const std::string& path) {
  if (path.size() >= kSlotPath) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (g_slots[i].state.compare_exchange_strong(expected, kClaimed)) {
      std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
      g_slots[i].state.store(kArmed, std::memory_order_release);
      return i;
    }
  }
  return -1;
}

void release_slot(int* slot) {
  if (*slot >= 0) g_slots[*slot].state.store(kFree, std::memory_order_release);
  *slot = -1;
}

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Status io_error(const char* what, const std::string& path, const char* reason) {
  return make_error(StatusCode::kIoError, "cannot write %s '%s': %s", what, display_escape(path).c_str(), reason);
}

}  // namespace

const char* file_kind_name(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a special file";
}

std::string display_escape(const std::string& s, bool keep_newlines) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  const unsigned char* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = p[i];
    const int len = utf8_sequence_length(p + i, s.size() - i);
    // C1 controls (U+0080..U+009F, 0xC2 0x80..0x9F) act as escape sequences in some terminals.
    const bool c1 = len == 2 && c == 0xC2 && p[i + 1] < 0xA0;
    if (len > 1 && !c1) {
      out.append(s, i, size_t(len));
      i += size_t(len);
      continue;
    }
    const int n = len > 1 ? len : 1;
    for (int k = 0; k < n; ++k, ++i) {
      const unsigned char b = p[i];
      if (b == '\n') out += keep_newlines ? "\n" : "\\n";
      else if (b == '\t') out += "\\t";
      else if (b == '\r') out += "\\r";
      else if (b < 0x20 || b >= 0x7F) out += {'\\', 'x', kHex[b >> 4], kHex[b & 15]};
      else out += char(b);
    }
  }
  return out;
}

Status open_regular_file(const std::string& path, const char* what, int* fd_out, uint64_t* size) {
  const std::string shown = display_escape(path);
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    return make_error(StatusCode::kIoError, "cannot open %s '%s': %s", what, shown.c_str(), std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return make_error(StatusCode::kIoError, "cannot open %s '%s': it is %s, not a regular file", what, shown.c_str(),
                      file_kind_name(st.st_mode));
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0)
    return make_error(StatusCode::kIoError, "cannot open %s '%s': %s", what, shown.c_str(), std::strerror(errno));
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(StatusCode::kIoError, "cannot open %s '%s': it is %s, not a regular file", what, shown.c_str(),
                      file_kind_name(st.st_mode));
  }
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  *fd_out = fd;
  *size = uint64_t(st.st_size);
  return Status::Ok();
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  if (stat(a.c_str(), &sa) != 0 || stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// ---------------------------------------------------------------------------------------

AtomicFile::~AtomicFile() { discard(); }

Status AtomicFile::open(const std::string& path, const char* what, bool replace) {
  discard();
  what_ = what;
  replace_ = replace;
  path_ = path;
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode)) {
      // Write where the link points, so the link (a "current model" switch, say) stays.
      struct stat target;
      if (stat(path.c_str(), &target) != 0) return io_error(what, path, "it is a symbolic link to nothing");
      if (!S_ISREG(target.st_mode)) {
        const std::string reason = std::string("it is a symbolic link to ") + file_kind_name(target.st_mode);
        return io_error(what, path, reason.c_str());
      }
      char* real = realpath(path.c_str(), nullptr);
      if (!real) return io_error(what, path, std::strerror(errno));
      path_ = real;
      std::free(real);
      st = target;
    }
    if (!S_ISREG(st.st_mode)) {
      const std::string reason = std::string("it is ") + file_kind_name(st.st_mode) + ", not a regular file";
      return io_error(what, path, reason.c_str());
    }
    if (!replace)
      return make_error(StatusCode::kInvalidArgument, "%s '%s' exists (pass --force to replace it)", what,
                        display_escape(path).c_str());
  }
  std::string tmp = path_ + ".partial.XXXXXX";
  // The file and its registry slot come into being together: a SIGINT, SIGTERM or SIGHUP
  // between the two would find a temporary the handler does not know. Held until both exist.
  sigset_t block, old;
  sigemptyset(&block);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  const int fd = mkostemp(&tmp[0], O_CLOEXEC);
  const int e = errno;
  if (fd >= 0) slot_ = arm_slot(tmp);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (fd < 0) {
    if (e == ENOENT || e == ENOTDIR)
      return io_error(what, path, ("its directory '" + display_escape(dir_of(path_)) + "' does not exist").c_str());
    return io_error(what, path, std::strerror(e));
  }
  fd_ = fd;
  tmp_ = tmp;
  // mkostemp creates the file 0600; an output is as readable as any file the user creates.
  const mode_t mask = umask(0);
  umask(mask);
  fchmod(fd_, 0666 & ~mask);
  end_ = 0;
  return Status::Ok();
}

Status AtomicFile::write_at(const void* data, uint64_t size, uint64_t offset) {
  if (fd_ < 0) return make_error(StatusCode::kInternal, "AtomicFile::write_at on a closed file");
  const uint8_t* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const size_t chunk = size_t(size < (1ull << 30) ? size : (1ull << 30));
    const ssize_t n = pwrite(fd_, p, chunk, off_t(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : EIO;
      return make_error(StatusCode::kIoError, "cannot write %s '%s': %s (at byte %llu)", what_.c_str(),
                        display_escape(path_).c_str(), std::strerror(e), (unsigned long long)offset);
    }
    p += n;
    size -= uint64_t(n);
    offset += uint64_t(n);
  }
  if (offset > end_) end_ = offset;
  return Status::Ok();
}

Status AtomicFile::write(const void* data, uint64_t size) { return write_at(data, size, end_); }

Status AtomicFile::commit() {
  if (fd_ < 0) return make_error(StatusCode::kInternal, "AtomicFile::commit without an open file");
  int err = 0;
  if (fsync(fd_) != 0) err = errno;
  if (::close(fd_) != 0 && err == 0) err = errno;
  fd_ = -1;
  if (err != 0) {
    discard();
    return io_error(what_.c_str(), path_, std::strerror(err));
  }
  // The target is checked again: a FIFO or device put there since open() is never replaced.
  struct stat st;
  if (lstat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    discard();
    const std::string reason = std::string("it is now ") + file_kind_name(st.st_mode) + ", not a regular file";
    return io_error(what_.c_str(), path_, reason.c_str());
  }
  int rc = 0;
  if (replace_) {
    rc = rename(tmp_.c_str(), path_.c_str());
  } else {
    rc = renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, path_.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {
      // A file system without RENAME_NOREPLACE: link() refuses an existing target too.
      rc = link(tmp_.c_str(), path_.c_str());
      if (rc == 0) unlink(tmp_.c_str());
    }
  }
  if (rc != 0) {
    const int e = errno;
    discard();
    if (e == EEXIST)
      return make_error(StatusCode::kInvalidArgument,
                        "%s '%s' was created by another process while this one was writing: kept, this output "
                        "discarded (pass --force to replace it)",
                        what_.c_str(), display_escape(path_).c_str());
    return io_error(what_.c_str(), path_, std::strerror(e));
  }
  release_slot(&slot_);
  tmp_.clear();
  // Make the rename itself durable (some file systems refuse to sync a directory: not an error).
  const int dfd = ::open(dir_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

void AtomicFile::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) unlink(tmp_.c_str());
  release_slot(&slot_);
  tmp_.clear();
}

Status write_file_atomic(const std::string& path, const char* what, const std::string& data) {
  AtomicFile f;
  PKV_RETURN_IF_ERROR(f.open(path, what, /*replace=*/true));
  PKV_RETURN_IF_ERROR(f.write(data.data(), data.size()));
  return f.commit();
}

void remove_pending_temporaries() {
  for (Slot& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == kArmed) unlink(s.path);
}

}  // namespace phasekv
