{
  "targets": [
    {
      "target_name": "rapid_native",
      "sources": ["<!@(node native/sources.cjs)"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "native/src"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags!": ["-fno-exceptions", "-fno-rtti"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-std=gnu++17"],
      "cflags_cc": ["-std=c++20", "-O3", "-fexceptions", "-Wall", "-Wextra", "-Wno-unused-parameter", "-pthread"],
      "ldflags": ["-pthread", "-Wl,-z,now"],
      "conditions": [
        ["OS=='mac'", {
          "xcode_settings": {
            "GCC_ENABLE_CPP_EXCEPTIONS": "YES",
            "CLANG_CXX_LANGUAGE_STANDARD": "c++20",
            "OTHER_CPLUSPLUSFLAGS": ["-O3", "-Wall", "-Wextra", "-Wno-unused-parameter"]
          }
        }],
        ["'<!(node -p \"process.env.RAPID_WERROR||''\")'=='1'", {
          "cflags_cc": ["-Werror"]
        }]
      ]
    }
  ]
}
