// The Settings page's Proxmox connections panel in a real Chromium (the system's), against the
// gateway tests/e2e/tests/connections.rs starts and a fake Proxmox VE API (fakepve):
//   sign in -> Settings shows no connection -> add one with a wrong fingerprint: refused with
//   connection_tls_mismatch and the fingerprint the server presented, nothing added -> add it
//   with that fingerprint: listed as connected -> check it again -> remove it.
//
// Environment (set by the Rust test):
//   PULSE_URL          the gateway
//   PULSE_PASSWORD     the bootstrap admin's password (user admin of org default)
//   PVE_URL            the fake Proxmox VE API
//   PVE_TOKEN_ID       an API token id it accepts, PVE_TOKEN_SECRET its secret
//   PVE_FINGERPRINT    the SHA-256 fingerprint of its certificate
//   PULSE_SCREENSHOTS  directory for the screenshot
//   CHROMIUM           the browser binary (default /usr/bin/chromium)
// Prints "all steps passed" when every step passed; otherwise the failing step, and exits 1.

import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import { join } from "node:path";

const need = (name) => {
  const value = process.env[name];
  if (!value) { throw new Error(`${name} is not set`); }
  return value;
};
const base = need("PULSE_URL");
const password = need("PULSE_PASSWORD");
const pveUrl = need("PVE_URL");
const tokenId = need("PVE_TOKEN_ID");
const tokenSecret = need("PVE_TOKEN_SECRET");
const fingerprint = need("PVE_FINGERPRINT");
const shots = need("PULSE_SCREENSHOTS");
mkdirSync(shots, { recursive: true });

let step = "launch";
const log = (text) => console.log(`[browser] ${text}`);
const begin = (name) => { step = name; log(`step: ${name}`); };

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
const errors = [];

try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 1600 } });
  const page = await context.newPage();
  page.setDefaultTimeout(30_000);
  page.on("pageerror", (err) => errors.push(String(err)));

  begin("sign in and open Settings");
  await page.goto(`${base}/settings`);
  await page.waitForURL(/\/signin/);
  await page.getByLabel("Organization").fill("default");
  await page.getByLabel("Username").fill("admin");
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Settings", level: 1 }).waitFor();
  const panel = page.locator("section#connections");
  await panel.getByRole("heading", { name: "Proxmox connections" }).waitFor();
  await panel.locator("#no-connections").waitFor();

  const form = page.locator("form#add-connection");
  const fill = async (pin, name, every) => {
    await form.getByLabel("URL").fill(pveUrl);
    await form.getByLabel("Name").fill(name);
    await form.getByLabel("Token ID").fill(tokenId);
    await form.getByLabel("Token secret").fill(tokenSecret);
    await form.getByLabel("Certificate SHA-256 fingerprint").fill(pin);
    if (every) { await form.getByLabel("Read every (seconds)").fill(every); }
    await form.getByRole("button", { name: "Check and add" }).click();
  };

  begin("a wrong fingerprint is refused with the one the server presented");
  await fill("00:".repeat(31) + "00", "home");
  const refused = page.locator(".flash.error", { hasText: "connection_tls_mismatch" });
  await refused.waitFor();
  const said = await refused.innerText();
  if (!said.includes(fingerprint)) { throw new Error(`the refusal does not name the presented fingerprint: ${said}`); }
  if (said.includes(tokenSecret)) { throw new Error("the refusal shows the token secret"); }
  await panel.locator("#no-connections").waitFor();

  begin("the right fingerprint adds it, connected, read every 45 s");
  await fill(fingerprint, "home", "45");
  await page.locator(".flash.ok", { hasText: "Connection home added: connected." }).waitFor();
  const row = panel.locator('tr[data-connection="home"]');
  await row.locator(".badge", { hasText: "connected" }).waitFor();
  await row.locator("td", { hasText: "45 s" }).waitFor();
  if ((await page.content()).includes(tokenSecret)) { throw new Error("the page shows the token secret"); }
  const unlabelled = await page.evaluate(() => Array.from(document.querySelectorAll("#connections input, #connections select, #connections textarea"))
    .filter((el) => el.type !== "hidden" && !el.getAttribute("aria-label") && !el.closest("label"))
    .map((el) => el.outerHTML.slice(0, 120)));
  if (unlabelled.length) { throw new Error(`controls without a label: ${unlabelled.join(" | ")}`); }
  await panel.screenshot({ path: join(shots, "connections.png") });

  begin("check it again");
  await row.getByRole("button", { name: "Check again" }).click();
  await page.locator(".flash.ok", { hasText: "Checked: connected" }).waitFor();

  begin("remove it");
  await page.locator('tr[data-connection="home"]').getByRole("button", { name: "Remove" }).click();
  await page.locator(".flash.ok", { hasText: "Connection removed." }).waitFor();
  await panel.locator("#no-connections").waitFor();

  if (errors.length) { throw new Error(`page errors: ${errors.join(" | ")}`); }
  log("all steps passed");
  console.log("all steps passed");
} catch (err) {
  console.log(`FAILED at step "${step}": ${err.stack || err}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
