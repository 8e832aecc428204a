// Lists every C++ source under native/src for binding.gyp, so adding a file needs no gyp edit.
const fs = require('fs');
const path = require('path');
const root = path.join(__dirname, 'src');
const out = [];
(function walk(dir) {
  for (const e of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) walk(p);
    else if (e.name.endsWith('.cpp')) out.push(path.relative(path.join(__dirname, '..'), p).split(path.sep).join('/'));
  }
})(root);
process.stdout.write(out.join(' '));
