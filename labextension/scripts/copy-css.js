// The widget ships the panel's stylesheet so both look the same.
const fs = require('fs');
const path = require('path');
const src = path.join(__dirname, '..', 'style', 'timeline.css');
const dest = path.join(__dirname, '..', '..', 'ipy_resume', '_frontend', 'widget.css');
fs.mkdirSync(path.dirname(dest), { recursive: true });
fs.copyFileSync(src, dest);
