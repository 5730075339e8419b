// The live view's page logic: polls the daemon for each new frame of the chosen sensor and
// draws it with three.js (a THREE.Points cloud, OrbitControls). The frame format is documented
// in userspace/src/view/wire.rs, the endpoints in userspace/src/view/server.rs.
import * as THREE from 'three';
import { OrbitControls } from 'three/addons/controls/OrbitControls.js';

const params = new URLSearchParams(location.search);
const bare = params.get('bare') === '1';
if (bare) document.body.classList.add('bare');

// Frame format (wire.rs): 40-byte header (flags u32 at 32: bit 0 the layout has an intensity),
// then 16 bytes a point (x, y, z f32, intensity u8).
const MAGIC = 0x3256584c; // "LXV2" read as a little-endian u32
const HEADER_LEN = 40;
const STRIDE = 16;

// What the browser test reads back (document.body.dataset too).
const view = { framesDrawn: 0, pointsDrawn: 0, sensor: '' };
window.lidarxdpView = view;

// ---- three.js scene: z up (the sensor's frame: x forward, y left, z up) ----
const BACKGROUND = 0x0d1117;
const renderer = new THREE.WebGLRenderer({ antialias: false, preserveDrawingBuffer: true });
renderer.setPixelRatio(window.devicePixelRatio);
renderer.setSize(window.innerWidth, window.innerHeight);
document.body.prepend(renderer.domElement);

const scene = new THREE.Scene();
scene.background = new THREE.Color(BACKGROUND);
const camera = new THREE.PerspectiveCamera(60, window.innerWidth / window.innerHeight, 0.1, 2000);
camera.up.set(0, 0, 1);
const HOME = new THREE.Vector3(-11, -15, 10);
camera.position.copy(HOME);
const controls = new OrbitControls(camera, renderer.domElement);
controls.enableDamping = true;
controls.target.set(0, 0, 0);
controls.update();
renderer.domElement.addEventListener('dblclick', () => {
  camera.position.copy(HOME);
  controls.target.set(0, 0, 0);
  controls.update();
});

if (!bare) {
  // 100 m x 100 m ground grid, 5 m cells, in the sensor's x-y plane; axes 2 m (x red, y green,
  // z blue).
  const grid = new THREE.GridHelper(100, 20, 0x30363d, 0x21262d);
  grid.rotation.x = Math.PI / 2;
  scene.add(grid);
  scene.add(new THREE.AxesHelper(2));
}

const geometry = new THREE.BufferGeometry();
let capacity = 0;
function ensureCapacity(n) {
  if (n <= capacity) return;
  capacity = Math.max(n, Math.ceil(capacity * 1.5), 1024);
  geometry.setAttribute('position', new THREE.BufferAttribute(new Float32Array(capacity * 3), 3));
  geometry.setAttribute('color', new THREE.BufferAttribute(new Float32Array(capacity * 3), 3));
}
ensureCapacity(1024);
geometry.setDrawRange(0, 0);
const material = new THREE.PointsMaterial({ size: 2, sizeAttenuation: false, vertexColors: true });
const cloud = new THREE.Points(geometry, material);
cloud.frustumCulled = false;
scene.add(cloud);

// ---- colours ----
// A blue -> cyan -> green -> yellow -> red ramp, t in [0, 1].
const RAMP = [
  [0.0, [0.16, 0.25, 0.85]],
  [0.25, [0.1, 0.75, 0.95]],
  [0.5, [0.2, 0.85, 0.3]],
  [0.75, [0.98, 0.85, 0.15]],
  [1.0, [0.95, 0.2, 0.15]],
];
function ramp(t, out, o) {
  t = t < 0 ? 0 : t > 1 ? 1 : t;
  let i = 1;
  while (i < RAMP.length - 1 && t > RAMP[i][0]) i++;
  const [t0, c0] = RAMP[i - 1];
  const [t1, c1] = RAMP[i];
  const f = (t - t0) / (t1 - t0);
  out[o] = c0[0] + (c1[0] - c0[0]) * f;
  out[o + 1] = c0[1] + (c1[1] - c0[1]) * f;
  out[o + 2] = c0[2] + (c1[2] - c0[2]) * f;
}
document.getElementById('legend').style.background =
  'linear-gradient(to right, ' +
  RAMP.map(([t, c]) => `rgb(${c.map((v) => Math.round(v * 255)).join(',')}) ${t * 100}%`).join(', ') +
  ')';

let colorMode = params.get('color') === 'height' ? 'height' : 'intensity';
function setMode(m) {
  colorMode = m;
  document.getElementById('by-intensity').classList.toggle('on', m === 'intensity');
  document.getElementById('by-height').classList.toggle('on', m === 'height');
  if (lastFrame) draw(lastFrame);
}
document.getElementById('by-intensity').onclick = () => setMode('intensity');
document.getElementById('by-height').onclick = () => setMode('height');

// The value at fraction q of the sorted sample of `get(i)` over n points (at most 4096 taken).
function quantiles(n, get, qs) {
  const k = Math.min(n, 4096);
  const s = new Float32Array(k);
  for (let j = 0; j < k; j++) s[j] = get(Math.floor((j * n) / k));
  s.sort();
  return qs.map((q) => s[Math.min(k - 1, Math.floor(q * (k - 1)))]);
}

// ---- frames ----
let lastFrame = null;
function draw(buf) {
  const dv = new DataView(buf);
  if (buf.byteLength < HEADER_LEN || dv.getUint32(0, true) !== MAGIC) return;
  const n = dv.getUint32(16, true);
  if (buf.byteLength !== HEADER_LEN + n * STRIDE) return;
  // A layout without an intensity is coloured by height, whatever the button says.
  const hasIntensity = (dv.getUint32(32, true) & 1) === 1;
  document.getElementById('by-intensity').disabled = !hasIntensity;
  const mode = hasIntensity ? colorMode : 'height';
  lastFrame = buf;
  ensureCapacity(n);
  const f = new Float32Array(buf, HEADER_LEN, n * 4);
  const b = new Uint8Array(buf, HEADER_LEN, n * STRIDE);
  const pos = geometry.attributes.position.array;
  const col = geometry.attributes.color.array;
  for (let i = 0; i < n; i++) {
    pos[3 * i] = f[4 * i];
    pos[3 * i + 1] = f[4 * i + 1];
    pos[3 * i + 2] = f[4 * i + 2];
  }
  let lo = 0;
  let hi = 1;
  let unit = '';
  if (n > 0 && mode === 'height') {
    [lo, hi] = quantiles(n, (i) => f[4 * i + 2], [0.02, 0.98]);
    unit = ' m';
  } else if (n > 0) {
    // Intensity: 0 to the frame's 99th percentile (most returns are dim), at least 16.
    [hi] = quantiles(n, (i) => b[STRIDE * i + 12], [0.99]);
    hi = Math.max(hi, 16);
  }
  const span = hi - lo || 1;
  for (let i = 0; i < n; i++) {
    const v = mode === 'height' ? f[4 * i + 2] : b[STRIDE * i + 12];
    ramp((v - lo) / span, col, 3 * i);
  }
  document.getElementById('legend-min').textContent = lo.toFixed(mode === 'height' ? 1 : 0) + unit;
  document.getElementById('legend-max').textContent = hi.toFixed(mode === 'height' ? 1 : 0) + unit;
  geometry.attributes.position.needsUpdate = true;
  geometry.attributes.color.needsUpdate = true;
  geometry.setDrawRange(0, n);
  const total = dv.getUint32(20, true);
  document.getElementById('points').textContent =
    n === total ? n.toLocaleString('en') : `${n.toLocaleString('en')} of ${total.toLocaleString('en')}`;
  document.getElementById('seq').textContent = String(dv.getBigUint64(8, true));
  view.framesDrawn += 1;
  view.pointsDrawn = n;
  document.body.dataset.framesDrawn = String(view.framesDrawn);
  document.body.dataset.pointsDrawn = String(n);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let sensor = params.get('sensor') || '';
let lastSeq = null; // sequence of the frame drawn last, of `sensor`

async function pollFrames() {
  for (;;) {
    if (!sensor) {
      await sleep(200);
      continue;
    }
    const asked = sensor;
    let url = `/api/frame?sensor=${encodeURIComponent(asked)}`;
    if (lastSeq !== null) url += `&after=${lastSeq}`;
    try {
      const r = await fetch(url, { cache: 'no-store' });
      if (r.status === 200) {
        const buf = await r.arrayBuffer();
        if (asked === sensor) {
          lastSeq = new DataView(buf).getBigUint64(8, true);
          draw(buf);
        }
      } else {
        await sleep(r.status === 204 ? 30 : 1000);
      }
    } catch {
      await sleep(1000);
    }
  }
}

// ---- status ----
function showStatus(st) {
  const pick = document.getElementById('sensor-pick');
  const names = st.sensors.map((s) => s.name);
  if (!names.includes(sensor)) {
    sensor = names[0] || '';
    lastSeq = null;
  }
  if (names.length > 1) {
    if (pick.options.length !== names.length) {
      pick.replaceChildren(...names.map((n) => new Option(n, n)));
    }
    pick.value = sensor;
    pick.hidden = false;
    document.getElementById('sensor-name').textContent = '';
  } else {
    pick.hidden = true;
    document.getElementById('sensor-name').textContent = sensor;
  }
  view.sensor = sensor;
  const s = st.sensors.find((x) => x.name === sensor);
  if (!s) return;
  // A restarted daemon counts its sequences from 0 again.
  if (lastSeq !== null && s.sequence !== null && BigInt(s.sequence) < lastSeq) lastSeq = null;
  // The model, unless the sensor is named after it.
  document.getElementById('model').textContent = s.model === s.name ? '' : `(${s.model})`;
  document.getElementById('fps').textContent = `${s.fps.toFixed(1)} Hz`;
  document.getElementById('loss').textContent = `${s.loss_percent.toFixed(2)} %`;
  const stale = document.getElementById('stale');
  if (s.frames === 0) stale.textContent = 'waiting for the first frame…';
  else if (s.age_ms > 2000) stale.textContent = `no frame for ${(s.age_ms / 1000).toFixed(0)} s`;
  else stale.textContent = '';
  if (s.frames_lost > 0) stale.textContent += ` ${s.frames_lost} frame(s) lost since start`;
}
document.getElementById('sensor-pick').onchange = (e) => {
  sensor = e.target.value;
  lastSeq = null;
  lastFrame = null;
  geometry.setDrawRange(0, 0);
};

async function pollStatus() {
  for (;;) {
    try {
      const r = await fetch('/api/status', { cache: 'no-store' });
      if (r.ok) showStatus(await r.json());
    } catch {
      document.getElementById('stale').textContent = 'daemon not reachable';
    }
    await sleep(1000);
  }
}

window.addEventListener('resize', () => {
  camera.aspect = window.innerWidth / window.innerHeight;
  camera.updateProjectionMatrix();
  renderer.setSize(window.innerWidth, window.innerHeight);
});
renderer.setAnimationLoop(() => {
  controls.update();
  renderer.render(scene, camera);
});
setMode(colorMode);
pollStatus();
pollFrames();
