// SPDX-License-Identifier: Apache-2.0
#include "catch.hpp"

#include <cuda_agent/cuda_agent.hpp>
#include <cuda_agent/detail/harness_session.hpp>
#include <cuda_agent/detail/head_tail_buffer.hpp>
#include <cuda_agent/detail/python_interpreter.hpp>
#include <cuda_agent/detail/sha256.hpp>
#include <cuda_agent/detail/text_format.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

namespace ca = cuda_agent;

TEST_CASE("SHA-256 matches the FIPS 180-4 test vectors", "[support]") {
  CHECK(ca::detail::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(ca::detail::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(ca::detail::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // A million 'a's, fed in uneven pieces to exercise block boundaries.
  ca::detail::Sha256 hash;
  const std::string piece(997, 'a');
  std::size_t fed = 0;
  while (fed + piece.size() <= 1'000'000) {
    hash.update(piece);
    fed += piece.size();
  }
  hash.update(std::string(1'000'000 - fed, 'a'));
  CHECK(hash.hex_digest() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // 55 and 56 bytes straddle the padding boundary.
  CHECK(ca::detail::sha256_hex(std::string(55, 'x')) != ca::detail::sha256_hex(std::string(56, 'x')));
}

TEST_CASE("the head-tail buffer keeps both ends within its limit", "[support]") {
  ca::detail::HeadTailBuffer small(10);
  small.append("abc");
  CHECK(small.text() == "abc");
  CHECK(small.elided_bytes() == 0);

  ca::detail::HeadTailBuffer buffer(10);
  for (char c = 'a'; c <= 'z'; ++c) buffer.append(std::string(1, c));
  CHECK(buffer.total_bytes() == 26);
  CHECK(buffer.elided_bytes() == 16);
  CHECK(buffer.text() == "abcde\n[... 16 bytes elided ...]\nvwxyz");

  ca::detail::HeadTailBuffer big_chunk(10);
  big_chunk.append(std::string(1000, '.') + "END");
  CHECK(big_chunk.text().substr(big_chunk.text().size() - 5) == "..END");

  ca::detail::HeadTailBuffer nothing(0);
  nothing.append("data");
  CHECK(nothing.text() == "\n[... 4 bytes elided ...]\n");
}

TEST_CASE("the version header agrees with the project version", "[support]") {
  CHECK(std::string(ca::version.string) == CUDA_AGENT_VERSION_STRING);
  CHECK(CUDA_AGENT_VERSION == ca::version.major * 10000 + ca::version.minor * 100 + ca::version.patch);
}

TEST_CASE("embedded resources are found by path", "[support]") {
  CHECK_FALSE(ca::embedded_resource("no/such/file"));
  for (const auto& file : ca::detail::embedded_files) {
    REQUIRE(ca::embedded_resource(file.path));
    CHECK(ca::embedded_resource(file.path)->size() == file.content.size());
  }
}

TEST_CASE("formatted text is never cut short", "[support]") {
  CHECK(ca::detail::format("%.3g and %s", 0.000123456, "words") == "0.000123 and words");
  const std::string long_text = ca::detail::format("%0300d|%s", 42, std::string(200, 'y').c_str());
  CHECK(long_text.size() == 300 + 1 + 200);
  CHECK(long_text.substr(295, 6) == "00042|");
}

TEST_CASE("the Python interpreter comes from the option, then the environment, then PATH", "[support]") {
  CHECK(ca::detail::configured_python("/opt/py/bin/python3") == "/opt/py/bin/python3");
  const char* saved = std::getenv("CUDA_AGENT_PYTHON");
  const std::string restore = saved ? saved : "";
  ::setenv("CUDA_AGENT_PYTHON", "/from/environment/python", 1);
  CHECK(ca::detail::configured_python({}) == "/from/environment/python");
  CHECK(ca::detail::locate_python({}) == std::filesystem::path("/from/environment/python"));  // a path: as it is
  ::setenv("CUDA_AGENT_PYTHON", "no-such-python-interpreter-here", 1);
  CHECK_FALSE(ca::detail::locate_python({}).has_value());  // a bare name that PATH does not have
  if (saved)
    ::setenv("CUDA_AGENT_PYTHON", restore.c_str(), 1);
  else
    ::unsetenv("CUDA_AGENT_PYTHON");
}

TEST_CASE("a harness session's files exist while it lasts and are gone after it, set-up failures included",
          "[support]") {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("cuda-agent-session-test-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  const fs::path module = root / "cuda_extension.so";
  std::ofstream(module) << "not really a module";
  const fs::path rendezvous = root / "rendezvous.sock";
  const ca::UserIdentity identity{::geteuid(), ::getegid()};
  {
    ca::detail::HarnessSessionFiles session(root, "abc", "class ModelNew: pass\n", module, identity);
    session.remove_with_session(rendezvous);
    std::ofstream(rendezvous) << "";
    CHECK(session.copy() == root / "candidates" / "abc");
    CHECK(fs::exists(session.copy() / "model_new.py"));
    CHECK(fs::exists(session.copy() / "cuda_extension.so"));
    struct stat fifo {};
    REQUIRE(::stat((session.directory() / "to_reference").c_str(), &fifo) == 0);
    CHECK(S_ISFIFO(fifo.st_mode));
    CHECK((fifo.st_mode & 0777) == 0666);
    CHECK(fs::is_directory(session.output()));
  }
  CHECK_FALSE(fs::exists(root / "candidates" / "abc"));
  CHECK_FALSE(fs::exists(root / "sessions" / "abc"));
  CHECK_FALSE(fs::exists(rendezvous));
  // A module that is not there: nothing of the half-made session stays behind.
  CHECK_THROWS(ca::detail::HarnessSessionFiles(root, "def", "", root / "missing.so", identity));
  CHECK_FALSE(fs::exists(root / "candidates" / "def"));
  CHECK_FALSE(fs::exists(root / "sessions" / "def"));
  fs::remove_all(root);
}
