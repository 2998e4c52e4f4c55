// fcp/file_io.h: bounded reads, atomic writes, short quotes (issue 19).
#include "fcp/file_io.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "fcp/error.h"

namespace fcp {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fcp_file_io_test." + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const char* name) const { return (dir_ / name).string(); }
  static std::string Slurp(const std::string& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  std::string ErrorOf(auto call) const {
    try {
      call();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }
  fs::path dir_;
};

TEST(QuoteForError, KeepsShortTextAndCutsLongText) {
  EXPECT_EQ(QuoteForError("abc"), "abc");
  EXPECT_EQ(QuoteForError(std::string("a\0b\n", 4)), "a?b?");
  const std::string quoted = QuoteForError(std::string(10'000'000, 'x'));
  EXPECT_EQ(quoted, std::string(kQuotedInputBytes, 'x') + "... (10000000 bytes)");
}

TEST_F(FileIoTest, ReadsAWholeFile) {
  std::ofstream(Path("a.txt")) << "12 34\n";
  EXPECT_EQ(ReadInputFile(Path("a.txt"), "lengths", 100), "12 34\n");
}

TEST_F(FileIoTest, RefusesDirectoriesLongFilesAndNulBytes) {
  EXPECT_THAT(ErrorOf([&] { ReadInputFile(dir_.string(), "plan", 100); }),
              HasSubstr("is a directory"));
  std::ofstream(Path("long.txt")) << std::string(101, '1');
  EXPECT_THAT(ErrorOf([&] { ReadInputFile(Path("long.txt"), "lengths", 100); }),
              HasSubstr("is larger than the limit of 100 bytes"));
  EXPECT_THAT(ErrorOf([&] { ReadInputFile("/dev/zero", "plan", uint64_t{1} << 40); }),
              HasSubstr("NUL byte at offset 0"));
  EXPECT_THAT(ErrorOf([&] { ReadInputFile(Path("missing"), "plan", 100); }),
              HasSubstr("No such file or directory"));
}

TEST_F(FileIoTest, AtomicWriteReplacesWholeOrNotAtAll) {
  const std::string path = Path("out.txt");
  std::ofstream(path) << "old";
  {
    AtomicFile file(path, "test");
    file.Write("new text", 8);
    EXPECT_EQ(Slurp(path), "old") << "visible before Commit";
  }  // destroyed without Commit: the old file stays, no temporary is left
  EXPECT_EQ(Slurp(path), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
  WriteFileAtomically(path, "new text", "test");
  EXPECT_EQ(Slurp(path), "new text");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(FileIoTest, AFullDeviceIsWrittenInPlaceAndNamesTheCause) {
  EXPECT_THAT(ErrorOf([] { WriteFileAtomically("/dev/full", std::string(1 << 20, 'x'), "plan"); }),
              HasSubstr("No space left on device"));
  EXPECT_TRUE(fs::is_character_file("/dev/full")) << "the device must never be replaced";
}

TEST_F(FileIoTest, ASymlinkKeepsPointingAtTheNewFile) {
  std::ofstream(Path("target.txt")) << "old";
  fs::create_symlink(Path("target.txt"), Path("link.txt"));
  WriteFileAtomically(Path("link.txt"), "new", "test");
  EXPECT_TRUE(fs::is_symlink(Path("link.txt")));
  EXPECT_EQ(Slurp(Path("target.txt")), "new");
}

// The library never prints: "-" is the caller's standard output, not a file
// the library writes (the command line's WriteOutput handles it).
TEST_F(FileIoTest, DashIsRefusedNotPrinted) {
  testing::internal::CaptureStdout();
  EXPECT_THAT(ErrorOf([] { WriteFileAtomically("-", "text", "plan"); }),
              HasSubstr("plan: '-' (standard output) is not a file"));
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
  EXPECT_FALSE(fs::exists("-"));
}

TEST_F(FileIoTest, MissingFolderIsAClearError) {
  EXPECT_THAT(ErrorOf([&] { WriteFileAtomically(Path("no/such/dir/x"), "x", "plan"); }),
              HasSubstr("No such file or directory"));
}

}  // namespace
}  // namespace fcp
