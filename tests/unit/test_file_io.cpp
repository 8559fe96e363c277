// Files around the inputs (hardening round two): outputs written whole or not at all and never
// over something that is not a regular file, inputs that never block, escaped display of
// untrusted strings, the model file's content hash and the no-mmap load, the host-memory
// limits the context creation checks.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "context.h"
#include "doctest/doctest.h"
#include "file_io.h"
#include "gguf_import.h"
#include "host_memory.h"
#include "model.h"
#include "sampler.h"
#include "test_util.h"

namespace phasekv {
namespace {

using test::read_bytes;
using test::tmp_path;
using test::write_bytes;

std::string read_text(const std::string& path) {
  const std::vector<uint8_t> b = read_bytes(path);
  return std::string(b.begin(), b.end());
}

// Names in `dir` that start with `prefix` (leftover temporaries).
std::vector<std::string> entries_with_prefix(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d))
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) out.push_back(e->d_name);
  closedir(d);
  return out;
}

std::string dir_of(const std::string& p) { return p.substr(0, p.find_last_of('/')); }
std::string base_of(const std::string& p) { return p.substr(p.find_last_of('/') + 1); }

}  // namespace

TEST_CASE("display_escape: control characters, C1 controls and invalid UTF-8 escaped, text and its output unchanged") {
  CHECK(display_escape("model.pkv") == "model.pkv");
  CHECK(display_escape("caf\xC3\xA9 \xE2\x96\x81 \xF0\x9F\x99\x82") == "caf\xC3\xA9 \xE2\x96\x81 \xF0\x9F\x99\x82");
  CHECK(display_escape("evil\x1b[2J\x07.pkv") == "evil\\x1b[2J\\x07.pkv");
  CHECK(display_escape("a\nb\tc\rd") == "a\\nb\\tc\\rd");
  CHECK(display_escape("a\nb", true) == "a\nb");
  CHECK(display_escape("x\x7fy") == "x\\x7fy");
  CHECK(display_escape("csi\xC2\x9B" "31m") == "csi\\xc2\\x9b31m");  // U+009B, an 8-bit CSI
  CHECK(display_escape("\xC2\xA0") == "\xC2\xA0");                   // U+00A0 is text
  CHECK(display_escape("bad\xff\xfe") == "bad\\xff\\xfe");
  CHECK(display_escape("cut\xE2\x96") == "cut\\xe2\\x96");          // a truncated sequence
  CHECK(display_escape("back\\slash") == "back\\slash");            // not an escape: output is text
  // On random bytes: the output holds no control byte and escaping it again changes nothing.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string s(size_t(rng() % 40), '\0');
    for (char& ch : s) ch = char(rng() & 0xff);
    const std::string e = display_escape(s);
    bool clean = true;
    for (unsigned char b : e) clean &= b >= 0x20 && b != 0x7f;
    CHECK(clean);
    CHECK(utf8_first_invalid(e) == -1);
    CHECK(display_escape(e) == e);
  }
}

TEST_CASE("open_regular_file: regular files open, directories, FIFOs and devices are refused without blocking") {
  const std::string f = tmp_path("reg.bin");
  write_bytes(f, {1, 2, 3});
  int fd = -1;
  uint64_t size = 0;
  REQUIRE(open_regular_file(f, "model", &fd, &size).ok());
  CHECK(size == 3);
  char buf[4] = {};
  CHECK(read(fd, buf, 4) == 3);  // a blocking descriptor that reads the file
  close(fd);
  std::remove(f.c_str());

  Status s = open_regular_file(f, "model", &fd, &size);
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(s.message().find("cannot open model") != std::string::npos);
  CHECK(s.message().find("No such file") != std::string::npos);

  s = open_regular_file(PHASEKV_TEST_TMP_DIR, "GGUF", &fd, &size);
  CHECK(s.message().find("it is a directory, not a regular file") != std::string::npos);
  s = open_regular_file("/dev/zero", "-f", &fd, &size);
  CHECK(s.message().find("cannot open -f '/dev/zero': it is a character device") != std::string::npos);

  const std::string fifo = tmp_path("fifo");
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  s = open_regular_file(fifo, "--template", &fd, &size);  // no writer: a plain open would block here
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(s.message().find("it is a FIFO") != std::string::npos);
  std::remove(fifo.c_str());
}

TEST_CASE("same_file: hard links, symbolic links and .. resolve to one file") {
  const std::string a = tmp_path("same_a");
  const std::string hard = tmp_path("same_hard");
  const std::string sym = tmp_path("same_sym");
  write_bytes(a, {1});
  REQUIRE(link(a.c_str(), hard.c_str()) == 0);
  REQUIRE(symlink(a.c_str(), sym.c_str()) == 0);
  CHECK(same_file(a, hard));
  CHECK(same_file(sym, a));
  CHECK(same_file(dir_of(a) + "/../" + base_of(dir_of(a)) + "/" + base_of(a), a));
  CHECK_FALSE(same_file(a, tmp_path("same_missing")));
  write_bytes(tmp_path("same_other"), {1});
  CHECK_FALSE(same_file(a, tmp_path("same_other")));
  for (const std::string& p : {a, hard, sym, tmp_path("same_other")}) std::remove(p.c_str());
}

TEST_CASE("AtomicFile: written whole or not at all, an exclusive temporary per writer, removed on failure") {
  const std::string out = tmp_path("atomic.out");
  const std::string dir = dir_of(out);
  const std::string prefix = base_of(out) + ".partial";
  std::remove(out.c_str());

  SUBCASE("commit publishes the bytes and leaves no temporary") {
    AtomicFile f;
    REQUIRE(f.open(out, "--json", false).ok());
    CHECK(f.temp_path() != out + ".partial");  // unique (mkostemp), never a predictable name
    struct stat st;
    REQUIRE(stat(f.temp_path().c_str(), &st) == 0);
    CHECK(st.st_nlink == 1);  // a new file, not a link to anything that existed
    CHECK(stat(out.c_str(), &st) != 0);  // nothing at the target until commit
    REQUIRE(f.write("hello ", 6).ok());
    REQUIRE(f.write("world", 5).ok());
    REQUIRE(f.commit().ok());
    CHECK(read_text(out) == "hello world");
    CHECK(entries_with_prefix(dir, prefix).empty());
  }
  SUBCASE("an abandoned write keeps the previous file and removes its temporary") {
    write_bytes(out, {'o', 'l', 'd'});
    {
      AtomicFile f;
      REQUIRE(f.open(out, "--json", true).ok());
      REQUIRE(f.write("new", 3).ok());
    }  // destroyed without commit: an error path
    CHECK(read_text(out) == "old");
    CHECK(entries_with_prefix(dir, prefix).empty());
  }
  SUBCASE("two writers without replace: the first to finish wins, the second reports and discards") {
    AtomicFile a, b;
    REQUIRE(a.open(out, "OUT", false).ok());
    REQUIRE(b.open(out, "OUT", false).ok());
    CHECK(a.temp_path() != b.temp_path());
    REQUIRE(a.write("first", 5).ok());
    REQUIRE(b.write("second", 6).ok());
    REQUIRE(a.commit().ok());
    const Status s = b.commit();
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find("was created by another process while this one was writing") != std::string::npos);
    CHECK(read_text(out) == "first");
    CHECK(entries_with_prefix(dir, prefix).empty());
  }
  SUBCASE("two writers with replace: both complete, the last one to finish is what remains") {
    AtomicFile a, b;
    REQUIRE(a.open(out, "OUT", true).ok());
    REQUIRE(b.open(out, "OUT", true).ok());
    REQUIRE(b.write("second", 6).ok());
    REQUIRE(a.write("first", 5).ok());
    REQUIRE(b.commit().ok());
    CHECK(read_text(out) == "second");
    REQUIRE(a.commit().ok());
    CHECK(read_text(out) == "first");
    CHECK(entries_with_prefix(dir, prefix).empty());
  }
  SUBCASE("without replace an existing file is refused at open") {
    write_bytes(out, {'x'});
    AtomicFile f;
    const Status s = f.open(out, "OUT", false);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find("exists (pass --force to replace it)") != std::string::npos);
    CHECK(read_text(out) == "x");
  }
  SUBCASE("a FIFO put at the target after open is never replaced") {
    AtomicFile f;
    REQUIRE(f.open(out, "--html", true).ok());
    REQUIRE(f.write("x", 1).ok());
    REQUIRE(mkfifo(out.c_str(), 0600) == 0);
    const Status s = f.commit();
    CHECK(s.code() == StatusCode::kIoError);
    CHECK(s.message().find("it is now a FIFO") != std::string::npos);
    struct stat st;
    REQUIRE(lstat(out.c_str(), &st) == 0);
    CHECK(S_ISFIFO(st.st_mode));
    CHECK(entries_with_prefix(dir, prefix).empty());
  }
  SUBCASE("devices, directories and dangling links are refused at open") {
    AtomicFile f;
    Status s = f.open("/dev/null", "OUT", true);
    CHECK(s.message().find("it is a character device, not a regular file") != std::string::npos);
    s = f.open(dir, "OUT", true);
    CHECK(s.message().find("it is a directory") != std::string::npos);
    const std::string dangling = tmp_path("atomic.dangling");
    REQUIRE(symlink(tmp_path("atomic.nowhere").c_str(), dangling.c_str()) == 0);
    s = f.open(dangling, "OUT", true);
    CHECK(s.message().find("a symbolic link to nothing") != std::string::npos);
    std::remove(dangling.c_str());
    s = f.open(tmp_path("no_such_dir") + "/x", "OUT", true);
    CHECK(s.message().find("does not exist") != std::string::npos);
  }
  SUBCASE("a symbolic link to a regular file: the target is replaced, the link stays") {
    const std::string target = tmp_path("atomic.target");
    write_bytes(target, {'o', 'l', 'd'});
    REQUIRE(symlink(target.c_str(), out.c_str()) == 0);
    AtomicFile f;
    REQUIRE(f.open(out, "OUT", true).ok());
    REQUIRE(f.write("new", 3).ok());
    REQUIRE(f.commit().ok());
    struct stat st;
    REQUIRE(lstat(out.c_str(), &st) == 0);
    CHECK(S_ISLNK(st.st_mode));
    CHECK(read_text(target) == "new");
    std::remove(target.c_str());
    CHECK(entries_with_prefix(dir_of(target), base_of(target) + ".partial").empty());
  }
  SUBCASE("remove_pending_temporaries (what a signal handler calls) unlinks uncommitted temporaries") {
    AtomicFile f;
    REQUIRE(f.open(out, "OUT", true).ok());
    const std::string tmp = f.temp_path();
    struct stat st;
    REQUIRE(stat(tmp.c_str(), &st) == 0);
    remove_pending_temporaries();
    CHECK(stat(tmp.c_str(), &st) != 0);
    f.discard();
    AtomicFile g;  // the registry slot is free again
    REQUIRE(g.open(out, "OUT", true).ok());
    REQUIRE(g.commit().ok());
  }
  std::remove(out.c_str());
}

TEST_CASE("model file: the converter records the content hash of the blob and verify detects an in-place change") {
  const std::string path = tmp_path("hash_tiny.pkv");
  REQUIRE(convert_gguf_to_pkv(test::data_dir() + "/tiny.gguf", path, ImportOptions{}).ok());
  std::unique_ptr<ModelFile> mf;
  ModelFile::OpenOptions verify;
  verify.verify = true;
  REQUIRE(ModelFile::open(path, verify, &mf).ok());
  REQUIRE(mf->spec().blob_hash.present());
  CHECK(mf->spec().blob_hash.digest.size() == 16);
  // The recorded digest is the hash of the blob as it lies in the file (computed here
  // independently of the writer's streaming pass, from the bytes read back).
  const std::vector<uint8_t> bytes = read_bytes(path);
  BlobHash h;
  REQUIRE(compute_blob_hash(bytes.data() + mf->header().blob_offset, mf->header().blob_size, &h).ok());
  CHECK(h.digest == mf->spec().blob_hash.digest);
  const uint64_t blob_at = mf->header().blob_offset;
  mf.reset();

  // One byte of the blob changed in place (what `cp new.pkv model.pkv` over a same-size file does).
  std::vector<uint8_t> changed = bytes;
  changed[size_t(blob_at + 77)] ^= 0x10;
  write_bytes(path, changed);
  REQUIRE(ModelFile::open(path, &mf).ok());  // the metadata is intact: loads without --verify
  Status s = mf->verify_blob_hash();
  CHECK(s.code() == StatusCode::kInvalidFile);
  CHECK(s.message().find("integrity.blob_hash: the tensor data does not match") != std::string::npos);
  CHECK(s.message().find(mf->spec().blob_hash.hex()) != std::string::npos);
  mf.reset();
  s = ModelFile::open(path, verify, &mf);
  CHECK(s.code() == StatusCode::kInvalidFile);
  std::unique_ptr<Model> model;
  Model::LoadOptions lo;
  lo.verify = true;
  CHECK(Model::load(path, lo, &model).code() == StatusCode::kInvalidFile);

  // A file written without a hash (the test writer's keep_layout) loads, but cannot be verified.
  test::TinyModel tm = test::make_tiny_model();
  WriteOptions wo;
  REQUIRE(write_model_file(path, tm.spec, tm.data(), wo).ok());  // lays out: hashed
  REQUIRE(ModelFile::open(path, verify, &mf).ok());
  ModelSpec laid = mf->spec();
  laid.blob_hash = BlobHash();
  std::vector<const void*> data = tm.data();
  mf.reset();
  wo.keep_layout = true;
  REQUIRE(write_model_file(path, laid, data, wo).ok());
  REQUIRE(ModelFile::open(path, &mf).ok());
  CHECK_FALSE(mf->spec().blob_hash.present());
  s = mf->verify_blob_hash();
  CHECK(s.code() == StatusCode::kUnsupported);
  CHECK(s.message().find("records no content hash") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("no-mmap load: the model owns a copy, so replacing or truncating the file changes nothing") {
  const std::string path = tmp_path("nommap_tiny.pkv");
  REQUIRE(convert_gguf_to_pkv(test::data_dir() + "/tiny.gguf", path, ImportOptions{}).ok());
  const std::vector<uint8_t> original = read_bytes(path);
  Model::LoadOptions copy;
  copy.mmap = false;
  copy.verify = true;
  std::unique_ptr<Model> mapped, owned;
  REQUIRE(Model::load(path, &mapped).ok());
  REQUIRE(Model::load(path, copy, &owned).ok());
  CHECK(mapped->file().mapped());
  CHECK_FALSE(owned->file().mapped());

  auto logits_after = [](const Model& m) {
    ContextParams p;
    p.n_ctx = 32;
    p.n_threads = 1;
    std::unique_ptr<Context> c;
    PKV_ASSERT(Context::create(m, p, &c).ok());
    const int32_t ids[] = {1, 5, 9, 2, 7};
    PKV_ASSERT(c->prefill(ids, 5).ok());
    return std::vector<float>(c->logits(), c->logits() + m.config().vocab_size);
  };
  const std::vector<float> before = logits_after(*owned);
  CHECK(before == logits_after(*mapped));  // same bits either way

  // Overwrite the file in place with other bytes of the same size (as `cp` does), then truncate it.
  std::vector<uint8_t> junk(original.size(), 0x55);
  write_bytes(path, junk);
  CHECK(logits_after(*owned) == before);
  CHECK(owned->file().verify_blob_hash().ok());
  // The mapping sees the new bytes: what --verify and the README's atomic replacement are for.
  CHECK_FALSE(mapped->file().verify_blob_hash().ok());
  mapped.reset();
  REQUIRE(truncate(path.c_str(), 0) == 0);
  CHECK(logits_after(*owned) == before);
  std::remove(path.c_str());
  CHECK(logits_after(*owned) == before);
}

TEST_CASE("host memory: MemAvailable and cgroup limits parsed from hand-written files") {
  uint64_t v = 0;
  const std::string meminfo =
      "MemTotal:       24572636 kB\nMemFree:         1203340 kB\nMemAvailable:   20512000 kB\nBuffers:   1 kB\n";
  REQUIRE(parse_meminfo_available(meminfo, &v));
  CHECK(v == 20512000ull * 1024);
  CHECK_FALSE(parse_meminfo_available("MemTotal: 5 kB\n", &v));
  CHECK_FALSE(parse_meminfo_available("MemAvailable: lots\n", &v));
  CHECK_FALSE(parse_meminfo_available("MemAvailable: 5 MB\n", &v));

  CHECK_FALSE(parse_cgroup_limit("max\n", &v));  // no limit
  REQUIRE(parse_cgroup_limit("1073741824\n", &v));
  CHECK(v == 1073741824ull);
  CHECK_FALSE(parse_cgroup_limit("-1\n", &v));
  CHECK_FALSE(parse_cgroup_limit("99999999999999999999999\n", &v));  // over 2^64
  CHECK_FALSE(parse_cgroup_limit("", &v));

  CHECK(parse_cgroup_v2_path("0::/user.slice/user-0.slice/session-3.scope\n") ==
        "/user.slice/user-0.slice/session-3.scope");
  CHECK(parse_cgroup_v2_path("12:memory:/docker/abc\n11:cpu:/docker/abc\n").empty());  // v1 only
  CHECK(parse_cgroup_v2_path("1:name=systemd:/x\n0::/\n") == "/");

  // On this machine: something is known, and it is less than the address space.
  const HostMemory hm = host_memory_available();
  if (hm.known) {
    CHECK(hm.available > 0);
    CHECK(hm.available < (1ull << 50));
    MESSAGE("this process can still have " << hm.available << " bytes (" << hm.source << ")");
  }
}

TEST_CASE("context creation: a plan beyond the memory this process can have is refused with kOutOfMemory") {
  const std::string path = tmp_path("oom_tiny.pkv");
  REQUIRE(convert_gguf_to_pkv(test::data_dir() + "/tiny.gguf", path, ImportOptions{}).ok());
  std::unique_ptr<Model> m;
  REQUIRE(Model::load(path, &m).ok());
  std::remove(path.c_str());
  const HostMemory hm = host_memory_available();
  if (!hm.known) {
    MESSAGE("skipped: this machine reports no available memory");
    return;
  }
  // The largest context the API allows, with a prefill chunk just as large: a plan far above
  // any machine's memory. It must be refused before a byte is allocated (no OOM kill).
  ContextParams p;
  p.n_ctx = 1u << 24;
  p.n_batch = 1u << 24;
  p.beyond_trained = true;
  p.n_threads = 1;
  std::unique_ptr<Context> c;
  const Status s = Context::create(*m, p, &c);
  CHECK(s.code() == StatusCode::kOutOfMemory);
  CHECK(s.message().find("more than this process can still have") != std::string::npos);
  CHECK(s.message().find("context arena (total)") != std::string::npos);  // the itemised plan
  CHECK(c == nullptr);
}

TEST_CASE("sampler: negative temperatures and histories beyond kMaxRepeatLastN are refused") {
  Sampler s;
  SamplerParams p;
  p.temperature = -1.0f;
  Status st = Sampler::create(8, p, &s);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK(st.message().find("temperature = -1 must be a finite number >= 0") != std::string::npos);
  p.temperature = 0.0f;
  CHECK(Sampler::create(8, p, &s).ok());
  p.repeat_last_n = kMaxRepeatLastN + 1;
  st = Sampler::create(8, p, &s);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  p.repeat_last_n = 2000000000;
  CHECK(Sampler::create(8, p, &s).code() == StatusCode::kInvalidArgument);
  p.repeat_last_n = kMaxRepeatLastN;
  CHECK(Sampler::create(8, p, &s).ok());
}

}  // namespace phasekv
