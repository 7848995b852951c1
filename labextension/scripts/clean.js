const fs = require('fs');
const path = require('path');
for (const p of ['lib', 'tsconfig.tsbuildinfo', '../ipy_resume/labextension', '../ipy_resume/_frontend']) {
  fs.rmSync(path.join(__dirname, '..', p), { recursive: true, force: true });
}
