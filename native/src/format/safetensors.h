// safetensors checkpoints: a memory-mapped, zero-copy reader (single file, index.json shards, or
// every *.safetensors in a directory) with strict validation, and a writer for `rapid convert`.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>
#include "format/json.h"
#include "tensor/dtype.h"

namespace rapid {

// One tensor inside a mapped file. `data` points into the mapping (valid while the Checkpoint lives).
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // path of the shard it lives in (for error messages)

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  std::string shape_str() const;  // "[896, 128]"
};

// A read-only mmap of one file (MAP_PRIVATE, PROT_READ). Movable, not copyable.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws std::runtime_error naming the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Parses and validates one safetensors file; appends its tensors (and "__metadata__" strings).
// Throws std::runtime_error("<path>: <problem>") on: file shorter than 8 bytes, header length
// beyond the file, header not JSON / not an object, unknown dtype, bad shape, offsets out of range,
// overlapping, or not equal to shape × dtype size.
void parse_safetensors(const MappedFile& file, std::vector<TensorView>& out,
                       std::map<std::string, std::string>* metadata = nullptr);

class Checkpoint {
 public:
  // Opens a model directory: model.safetensors.index.json (shards; every listed tensor must be in
  // its shard and every shard must exist), else model.safetensors, else all *.safetensors (sorted).
  // A path to a single .safetensors file is accepted too. Duplicate tensor names are an error.
  static std::unique_ptr<Checkpoint> open(const std::string& dir);

  const TensorView* find(const std::string& name) const;  // nullptr if absent
  const TensorView& get(const std::string& name) const;   // throws "missing tensor NAME in DIR"
  bool has(const std::string& name) const { return find(name) != nullptr; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  size_t mapped_bytes() const;      // total size of all mapped files
  const std::string& dir() const { return dir_; }
  // Parsed <dir>/config.json; throws if missing or invalid (naming the file).
  Json config() const;
  // Metadata of the first file's "__metadata__" (string values), possibly empty.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: bytes must hold exactly numel × dtype_size bytes.
struct TensorData {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // borrowed
  size_t nbytes = 0;
};

// Writes one safetensors file (tensors sorted by name, 8-byte aligned header, like the Python
// library). metadata goes into "__metadata__" (e.g. {"format":"mlx"}). Throws on I/O errors.
void write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Reads a whole small file (config.json etc.); throws std::runtime_error naming the path.
std::string read_text_file(const std::string& path);

}  // namespace rapid
