// Anchors the precompiled test header (catch.hpp, nlohmann/json.hpp) that test executables reuse.
