# Homebrew formula: installs the published npm tarball (with its prebuilt native binaries) on Node.
class Rapid < Formula
  desc "Run vision-language and text LLMs locally, one-shot or as an OpenAI-compatible server"
  homepage "https://github.com/rapid-vlm/rapid"
  url "https://registry.npmjs.org/rapid-vlm/-/rapid-vlm-0.1.0.tgz"
  sha256 "0000000000000000000000000000000000000000000000000000000000000000"
  license "MIT"

  depends_on "node"

  def install
    system "npm", "install", *std_npm_args
    bin.install_symlink libexec.glob("bin/*")
  end

  test do
    assert_match "Usage: rapid", shell_output("#{bin}/rapid --help")
  end
end
