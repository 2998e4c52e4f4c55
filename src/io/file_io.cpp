#include "fcp/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "fcp/error.h"

namespace fcp {

std::string ReadInputFile(const std::string& path, const std::string& what, uint64_t max_bytes) {
  const bool is_stdin = path == "-";
  const std::string name = is_stdin ? std::string("stdin") : "'" + path + "'";
  std::FILE* f = is_stdin ? stdin : std::fopen(path.c_str(), "rb");
  if (!f) throw Error(ErrorCode::kIo, what + ": cannot open " + name + ": " + std::strerror(errno));
  struct Closer {
    std::FILE* f;
    bool owned;
    ~Closer() {
      if (owned) std::fclose(f);
    }
  } closer{f, !is_stdin};
  struct stat info {};
  if (fstat(fileno(f), &info) == 0 && S_ISDIR(info.st_mode))
    throw Error(ErrorCode::kIo, what + ": " + name + " is a directory, not a file");
  std::string text;
  if (S_ISREG(info.st_mode) && static_cast<uint64_t>(info.st_size) <= max_bytes)
    text.reserve(static_cast<size_t>(info.st_size));
  char chunk[1 << 16];
  for (;;) {
    const size_t got = std::fread(chunk, 1, sizeof chunk, f);
    if (text.size() + got > max_bytes)
      throw Error(ErrorCode::kIo, what + ": " + name + " is larger than the limit of " +
                                      std::to_string(max_bytes) + " bytes");
    // Text formats never hold a NUL byte: stop at once on one (/dev/zero, a
    // binary file given by mistake) instead of reading up to the limit.
    if (const void* nul = std::memchr(chunk, '\0', got))
      throw Error(ErrorCode::kParse,
                  what + ": " + name + " holds a NUL byte at offset " +
                      std::to_string(text.size() + (static_cast<const char*>(nul) - chunk)) +
                      ": not a text file");
    text.append(chunk, got);
    if (got < sizeof chunk) break;
  }
  if (std::ferror(f))
    throw Error(ErrorCode::kIo, what + ": failed reading " + name + ": " + std::strerror(errno));
  return text;
}

AtomicFile::AtomicFile(const std::string& path, const std::string& what)
    : path_(path), what_(what) {
  if (path == "-")
    throw Error(ErrorCode::kInvalidArgument,
                what + ": '-' (standard output) is not a file; the caller writes standard output");
  std::filesystem::path p(path);
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(p, error);
  if (std::filesystem::is_directory(status))
    throw Error(ErrorCode::kIo, what + ": cannot write '" + path + "': it is a directory");
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    // A device or a pipe (/dev/stdout, /dev/null, a FIFO): written in place,
    // never replaced by a rename.
    file_ = std::fopen(path.c_str(), "wb");
    if (!file_) {
      const int e = errno;
      throw Error(ErrorCode::kIo, what + ": cannot open '" + path + "': " + std::strerror(e));
    }
    return;
  }
  // A symbolic link to a file: the file it names is replaced, not the link.
  if (std::filesystem::is_symlink(std::filesystem::symlink_status(p, error)))
    p = std::filesystem::canonical(p, error);
  target_ = p.string();
  // Hidden, next to the destination (rename stays within one file system),
  // unique per process so concurrent writers do not share a temporary.
  temp_ = (p.parent_path() / ("." + p.filename().string() + ".tmp." + std::to_string(getpid())))
              .string();
  file_ = std::fopen(temp_.c_str(), "wb");
  if (!file_) {
    const int e = errno;
    throw Error(ErrorCode::kIo, what + ": cannot create '" + path + "': " + std::strerror(e));
  }
}

AtomicFile::~AtomicFile() {
  if (file_) std::fclose(file_);
  if (!temp_.empty()) std::remove(temp_.c_str());
}

void AtomicFile::Fail(const std::string& action, int error_number) {
  if (file_) std::fclose(file_);
  file_ = nullptr;
  if (!temp_.empty()) std::remove(temp_.c_str());
  temp_.clear();
  throw Error(ErrorCode::kIo,
              what_ + ": " + action + " '" + path_ + "': " + std::strerror(error_number));
}

void AtomicFile::Write(const void* data, size_t bytes) {
  if (bytes > 0 && std::fwrite(data, 1, bytes, file_) != bytes) Fail("failed writing", errno);
}

void AtomicFile::Commit() {
  // A full disk often shows only when the buffer is flushed or the file closed.
  if (std::fflush(file_) != 0) Fail("failed writing", errno);
  if (!temp_.empty() && fsync(fileno(file_)) != 0 && errno != EINVAL && errno != EROFS)
    Fail("failed writing", errno);
  const int closed = std::fclose(file_);
  file_ = nullptr;
  if (closed != 0) Fail("failed writing", errno);
  if (temp_.empty()) return;  // written in place
  if (std::rename(temp_.c_str(), target_.c_str()) != 0)
    Fail("cannot rename the temporary over", errno);
  temp_.clear();
}

void WriteFileAtomically(const std::string& path, std::string_view text, const std::string& what) {
  AtomicFile file(path, what);
  file.Write(text.data(), text.size());
  file.Commit();
}

}  // namespace fcp
