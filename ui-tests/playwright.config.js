/**
 * Galata/Playwright against Debian's chromium (`apt-get install chromium`);
 * Playwright's own browser download cannot work on these machines.
 */
const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

const port = Number(process.env.UI_TEST_PORT || 18888);

module.exports = {
  ...baseConfig,
  testDir: './tests',
  timeout: 180000,
  expect: { timeout: 30000 },
  workers: 1,
  retries: process.env.CI ? 1 : 0,
  reporter: [['list'], ['html', { open: 'never', outputFolder: 'playwright-report' }]],
  outputDir: 'test-results',
  use: {
    ...baseConfig.use,
    baseURL: `http://127.0.0.1:${port}`,
    viewport: { width: 1400, height: 900 },
    video: 'off',
    trace: 'off',
    screenshot: 'only-on-failure',
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-dev-shm-usage']
    }
  },
  webServer: {
    command: 'jupyter lab --config jupyter_server_test_config.py',
    url: `http://127.0.0.1:${port}/lab`,
    timeout: 180000,
    reuseExistingServer: false,
    stdout: 'ignore',
    stderr: 'pipe'
  }
};
