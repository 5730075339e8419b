//! The configuration's rules, with exact messages.

use super::plan::ZenohPlan;
use super::sections::{QueueSettings, SensorSettings};
use super::*;
use lidarxdp::capture::Backend;
use lidarxdp_core::ros2::Distro;
use lidarxdp_core::sensor::{SensorModel, Stamp};
use std::net::Ipv4Addr;

fn sensor(name: &str, port: u16) -> SensorSettings {
    SensorSettings {
        name: Some(name.into()),
        model: Some(SensorModel::Vlp16),
        calibration: Some("cal.yaml".into()),
        port: Some(valid::UdpPort::new(port.into()).unwrap()),
        ..SensorSettings::default()
    }
}

fn settings(sensors: Vec<SensorSettings>) -> Settings {
    let mut s = Settings {
        sensors,
        ..Settings::default()
    };
    s.capture.iface = Some("eth0".into());
    s
}

fn plan(s: Settings) -> anyhow::Result<Plan> {
    build(s, None, &Ros2Env::default())
}

fn err(s: Settings) -> String {
    plan(s).unwrap_err().to_string()
}

fn toml_sensor(text: &str) -> SensorSettings {
    toml::from_str(text).unwrap()
}

#[test]
fn second_ports_are_on_by_default() {
    let rs = |name: &str, port: u16, extra: Option<u64>| SensorSettings {
        model: Some(SensorModel::Helios),
        extra_port: extra.map(|e| valid::Ranged::new(e).unwrap()),
        ..sensor(name, port)
    };
    let extra = |p: &Plan| p.sensors().map(|s| s.extra_port).collect::<Vec<_>>();
    // RoboSense DIFOP 7788 always; Velodyne position 8308 beside the default data port only.
    let p = plan(settings(vec![
        rs("a", 6699, None),
        sensor("v", 2368),
        sensor("w", 2369),
    ]))
    .unwrap();
    assert_eq!(extra(&p), [Some(7788), Some(8308), None]);
    let p = plan(settings(vec![rs("a", 6699, Some(0))])).unwrap();
    assert_eq!(extra(&p), [None]);
    let p = plan(settings(vec![rs("a", 6699, Some(7789))])).unwrap();
    assert_eq!(extra(&p), [Some(7789)]);
    // Two RoboSense sensors from any source cannot both have the default DIFOP port.
    assert_eq!(
        err(settings(vec![rs("a", 6699, None), rs("b", 6700, None)])),
        "sensors[1].extra_port: port 7788 from any source on eth0 is already sensors[0]'s; \
         each (port, source) names one sensor (it is the model's default second port: \
         RoboSense DIFOP 7788, Velodyne position 8308, Ouster IMU 7503; give each sensor its \
         own source or extra_port, or extra_port = 0 for none)"
    );
    // 0 turns Velodyne's default off; on another data port there is no default to turn off.
    let off = |port| SensorSettings {
        extra_port: Some(valid::Ranged::new(0).unwrap()),
        ..sensor("v", port)
    };
    assert_eq!(extra(&plan(settings(vec![off(2368)])).unwrap()), [None]);
    assert_eq!(
        err(settings(vec![off(2369)])),
        "sensors[0].extra_port: 0 is out of range for VLP16 on data port 2369; valid \
         1..=65535 (0 turns off only a default second port: RoboSense's DIFOP 7788, \
         Velodyne's position 8308 and Ouster's IMU 7503 beside their default data port)"
    );
}

#[test]
fn health_thresholds_default_and_are_checked() {
    use lidarxdp_core::health::Thresholds;
    let p = plan(settings(vec![sensor("v", 2368)])).unwrap();
    assert_eq!(p.sensors().next().unwrap().health, Thresholds::default());
    let s: SensorSettings = toml_sensor(
        "health_loss_warn = 1.5\nhealth_loss_error = 20\nhealth_silence_ms = 250\n\
         health_offset_ms = 0",
    );
    let p = plan(settings(vec![SensorSettings {
        model: Some(SensorModel::Vlp16),
        calibration: Some("c.yaml".into()),
        ..s
    }]))
    .unwrap();
    assert_eq!(
        p.sensors().next().unwrap().health,
        Thresholds {
            loss_warn_percent: 1.5,
            loss_error_percent: 20.0,
            silence_error_ns: 250_000_000,
            offset_warn_ns: 0,
        }
    );
    assert_eq!(
        toml::from_str::<SensorSettings>("health_loss_warn = 101")
            .unwrap_err()
            .message(),
        "101 is out of range; valid [0, 100] %"
    );
    let s = toml_sensor("health_loss_warn = 5\nhealth_loss_error = 1");
    assert_eq!(
        err(settings(vec![SensorSettings {
            model: Some(SensorModel::Vlp16),
            calibration: Some("c.yaml".into()),
            ..s
        }])),
        "sensors[0].health_loss_error: 1 is below sensors[0].health_loss_warn = 5; the ERROR \
         level must be at or above the WARN level"
    );
}

#[test]
fn sensors_group_into_queues_in_order() {
    let mut b = sensor("rear", 2369);
    b.queue = Some(valid::Ranged::new(1).unwrap());
    let mut s = settings(vec![sensor("front", 2368), b, sensor("left", 2370)]);
    s.queues =
        vec![toml::from_str("iface = \"eth0\"\nqueue = 1\ncpu = 0\numem_frames = 8192").unwrap()];
    let p = plan(s).unwrap();
    assert_eq!(p.queues.len(), 2);
    assert_eq!((p.queues[0].queue, p.queues[0].sensors.len()), (0, 2));
    assert_eq!(p.queues[0].sensors[1].name, "left");
    assert_eq!(p.queues[0].sensors[1].id, 2);
    assert_eq!(p.queues[1].umem_frames, 8192);
    assert_eq!(p.queues[1].cpu, Some(0));
    assert_eq!(p.queues[0].umem_frames, 4096);
    let ids: Vec<u16> = p.sensors().map(|s| s.id).collect();
    assert_eq!(ids, [0, 1, 2]);
}

#[test]
fn errors_name_the_field_value_and_range() {
    assert!(
        err(settings(vec![sensor("a", 2368), sensor("a", 2369)]))
            .starts_with("sensors[1].name: \"a\" is already the name of sensors[0]")
    );
    assert!(
        err(settings(vec![sensor("a", 2368), sensor("b", 2368)])).starts_with(
            "sensors[1].port: port 2368 from any source on eth0 is already sensors[0]'s"
        )
    );
    let mut s = settings(vec![sensor("a", 2368)]);
    s.queues = vec![QueueSettings {
        queue: Some(valid::Ranged::new(3).unwrap()),
        ..QueueSettings::default()
    }];
    assert!(err(s).starts_with("queues[0]: no sensor is assigned to eth0 queue 3"));
    let mut x = sensor("a", 2368);
    x.return_mode = Some("quad".into());
    assert!(err(settings(vec![x])).starts_with("sensors[0].return_mode: "));
    let m = |v: f32| Some(valid::Metres::new(v).unwrap());
    let mut x = sensor("a", 2368);
    x.min_range = m(150.0);
    assert_eq!(
        err(settings(vec![x])),
        "sensors[0].min_range: 150 is out of range; valid [0, 100) m (the VLP16 datasheet \
         range is 0 to 100 m)"
    );
    let mut x = sensor("a", 2368);
    x.min_range = m(150.0);
    x.max_range = m(200.0);
    assert!(plan(settings(vec![x])).is_ok());
    let mut x = sensor("a", 2368);
    x.min_range = m(5.0);
    x.max_range = m(5.0);
    assert_eq!(
        err(settings(vec![x])),
        "sensors[0].max_range: 5 is out of range; valid (min_range = 5, 1000] m \
         (the VLP16 datasheet range is 0 to 100 m)"
    );
    // The single-sensor flags name the flag.
    let mut s = settings(vec![]);
    s.sensor = sensor("a", 2368);
    s.sensor.min_range = m(150.0);
    assert!(err(s).starts_with("--min-range: 150 is out of range"));
}

/// The range of each key is checked when the file is read: the TOML reader names the line
/// and key, the message the value and the valid range.
#[test]
fn file_values_are_checked_by_their_types() {
    let e = |text: &str| toml::from_str::<Settings>(text).unwrap_err().to_string();
    let cases = [
        (
            "[[sensors]]\ncut_angle = 361.0\n",
            "cut_angle = 361.0",
            "361 is out of range; valid [0, 360] deg",
        ),
        (
            "[[sensors]]\nport = 0\n",
            "port = 0",
            "0 is out of range; valid 1..=65535",
        ),
        (
            "[[sensors]]\nqueue = 64\n",
            "queue = 64",
            "64 is out of range; valid 0..=63",
        ),
        (
            "[[sensors]]\nmax_range = 1001\n",
            "max_range = 1001",
            "1001 is out of range; valid [0, 1000] m",
        ),
        (
            "[tcp]\nmax_subscribers = 0\n",
            "max_subscribers = 0",
            "0 is out of range; valid 1..=1024",
        ),
        (
            "[tcp]\nsubscriber_queue = 65\n",
            "subscriber_queue = 65",
            "65 is out of range; valid 1..=64",
        ),
        (
            "[capture]\nframe_queue = 1025\n",
            "frame_queue = 1025",
            "1025 is out of range; valid 1..=1024",
        ),
        (
            "[capture]\numem_frames = 100\n",
            "umem_frames = 100",
            "100 is out of range; valid a power of two in 64..=65536",
        ),
        (
            "[zenoh]\nshm_mb = 4097\n",
            "shm_mb = 4097",
            "4097 is out of range; valid 0..=4096",
        ),
        (
            "[process]\nmemory_growth_warn_mb_per_hour = 65537\n",
            "memory_growth_warn_mb_per_hour = 65537",
            "65537 is out of range; valid 0..=65536",
        ),
        (
            "[process]\nmemory_growth_warn_mb_per_hour = -1\n",
            "memory_growth_warn_mb_per_hour = -1",
            "valid 0..=65536",
        ),
        (
            "[ros2]\ndomain_id = 233\n",
            "domain_id = 233",
            "233 is out of range; valid 0..=232",
        ),
        (
            "[recording]\nsplit_duration_s = 0\n",
            "split_duration_s = 0",
            "0 is out of range; valid 1..=604800",
        ),
        (
            "[[sensors]]\nfov = [10.0, 10.0]\n",
            "fov = [10.0, 10.0]",
            "10:10 is out of range; valid MIN:MAX with MIN and MAX in [0, 360] deg and MAX not \
             equal to MIN modulo 360 at 0.01 deg (MIN > MAX wraps through 0), or 0:360 for \
             the full circle (no field of view)",
        ),
        (
            "[[sensors]]\nfov = [0.0, 361.0]\n",
            "fov = [0.0, 361.0]",
            "361 is out of range; valid [0, 360] deg",
        ),
        (
            "[[sensors]]\nframe_timeout_ms = 60001\n",
            "frame_timeout_ms = 60001",
            "60001 is out of range; valid 1..=60000",
        ),
        (
            "[[sensors]]\nstamp = \"gps\"\n",
            "stamp = \"gps\"",
            "unknown stamp 'gps'; valid: sensor, host",
        ),
        (
            "[tcp]\nlisten_public = true\n",
            "listen_public",
            "unknown field `listen_public`",
        ),
    ];
    for (text, key, msg) in cases {
        let got = e(text);
        assert!(got.contains(key) && got.contains(msg), "{text:?}: {got}");
    }
}

#[test]
fn ranges_default_to_the_datasheet_and_stamp_to_sensor() {
    let b = toml_sensor(
        "name = \"b\"\nmodel = \"pandarxt32\"\ncalibration = \"c.csv\"\nport = 2369\n\
         min_range = 0.5\nstamp = \"host\"",
    );
    let p = plan(settings(vec![sensor("a", 2368), b])).unwrap();
    let s = &p.queues[0].sensors;
    assert_eq!(
        (s[0].range.min().get(), s[0].range.max().get(), s[0].stamp),
        (0.0, 100.0, Stamp::Sensor)
    );
    assert_eq!(
        (s[1].range.min().get(), s[1].range.max().get(), s[1].stamp),
        (0.5, 120.0, Stamp::Host)
    );
}

#[test]
fn same_port_from_distinct_sources_is_two_sensors() {
    let mut a = sensor("a", 2368);
    a.source = Some(Ipv4Addr::new(192, 168, 1, 201).into());
    let mut b = sensor("b", 2368);
    b.source = Some(Ipv4Addr::new(192, 168, 1, 202).into());
    let p = plan(settings(vec![a, b, sensor("c", 2368)])).unwrap();
    assert_eq!(p.queues[0].sensors.len(), 3);
}

#[test]
fn single_sensor_flags_and_sections_exclude_each_other() {
    let mut s = settings(vec![sensor("a", 2368)]);
    s.sensor = sensor("b", 2369);
    assert!(err(s).contains("exclude each other"));
    let mut s = settings(vec![]);
    s.sensor = SensorSettings {
        model: Some(SensorModel::Vlp16),
        ..SensorSettings::default()
    };
    assert_eq!(
        err(s),
        "--calibration: required (the model's calibration or metadata file)"
    );
}

/// `[process] memory_growth_warn_mb_per_hour`: 16 MiB/h by default, 0 (never) and the
/// range's ends accepted, the flag over the file, and the flag's range checked like the key's.
#[test]
fn memory_growth_warn_defaults_and_is_checked() {
    let of = |text: &str| {
        let s: Settings = toml::from_str(&format!(
            "[capture]\niface = \"eth0\"\n{text}\n[[sensors]]\nmodel = \"vlp16\"\n\
             calibration = \"c.yaml\"\n"
        ))
        .unwrap();
        plan(s).unwrap().process.memory_growth_warn_mb_per_hour
    };
    assert_eq!(of(""), 16);
    assert_eq!(of("[process]\nmemory_growth_warn_mb_per_hour = 0"), 0);
    assert_eq!(
        of("[process]\nmemory_growth_warn_mb_per_hour = 65536"),
        65536
    );
    let file: Settings = toml::from_str(
        "[capture]\niface = \"eth0\"\n[process]\nmemory_growth_warn_mb_per_hour = 64\n\
         [[sensors]]\nmodel = \"vlp16\"\ncalibration = \"c.yaml\"\n",
    )
    .unwrap();
    let mut flags = Settings::default();
    flags.process.memory_growth_warn_mb_per_hour = Some(valid::Ranged::new(8).unwrap());
    assert_eq!(
        plan(flags.over(file))
            .unwrap()
            .process
            .memory_growth_warn_mb_per_hour,
        8
    );
    assert_eq!(
        valid::Ranged::<0, 65536>::new(65537)
            .unwrap_err()
            .to_string(),
        "65537 is out of range; valid 0..=65536"
    );
}

#[test]
fn flags_win_over_the_file_field_by_field() {
    let file: Settings = toml::from_str(
        "[capture]\niface = \"eth1\"\nframe_queue = 8\n[tcp]\nmax_subscribers = 4\n\
         subscriber_queue = 2\n[[sensors]]\nmodel = \"vlp16\"\ncalibration = \"c.yaml\"\n",
    )
    .unwrap();
    let mut flags = Settings::default();
    flags.tcp.max_subscribers = Some(valid::Ranged::new(9).unwrap());
    let p = plan(flags.over(file)).unwrap();
    assert_eq!(p.sinks.tcp.max_subscribers, 9);
    assert_eq!(p.sinks.tcp.subscriber_queue, 2);
    assert_eq!(p.capture.frame_queue, 8);
    assert_eq!(p.queues[0].iface, "eth1");
}

#[test]
fn every_listener_is_loopback_only() {
    for (text, msg) in [
        (
            "[tcp]\nlisten = \"0.0.0.0:7510\"",
            "--listen (tcp.listen): 0.0.0.0:7510 is not a loopback address",
        ),
        (
            "[metrics]\nlisten = \"10.0.0.1:9751\"",
            "--metrics (metrics.listen): 10.0.0.1:9751 is not a loopback address",
        ),
        (
            "[foxglove]\nlisten = \"[::]:8765\"",
            "--foxglove (foxglove.listen): [::]:8765 is not a loopback address",
        ),
    ] {
        let mut s: Settings = toml::from_str(text).unwrap();
        s.capture.iface = Some("eth0".into());
        s.sensors = vec![sensor("a", 2368)];
        let e = err(s);
        assert!(e.starts_with(msg), "{e}");
    }
    let mut s: Settings = toml::from_str("[tcp]\nlisten = \"127.0.0.2:7510\"").unwrap();
    s.capture.iface = Some("eth0".into());
    s.sensors = vec![sensor("a", 2368)];
    assert_eq!(
        plan(s).unwrap().sinks.tcp.listen.to_string(),
        "127.0.0.2:7510"
    );
}

#[test]
fn zenoh_settings_are_checked_and_defaulted() {
    let zen = |mut s: Settings| {
        s.zenoh.zenoh = Some(true);
        s
    };
    let env = |id: &str| Ros2Env {
        ros_domain_id: Some(id.into()),
        ..Ros2Env::default()
    };
    // Off: zenoh-only settings are refused, topics are not checked.
    let mut s = settings(vec![sensor("front-left", 2368)]);
    s.ros2.ros_domain_id = Some(valid::Ranged::new(3).unwrap());
    assert_eq!(
        err(s),
        "--ros-domain-id (ros2.domain_id): only meaningful with --zenoh or --dds \
         (zenoh.enabled = true or dds.enabled = true)"
    );
    let p = plan(settings(vec![sensor("front-left", 2368)])).unwrap();
    assert_eq!(p.sinks.zenoh, None);
    assert_eq!(p.queues[0].sensors[0].topic, "/lidar/front-left/points");
    // On: defaults.
    let p = plan(zen(settings(vec![sensor("front", 2368)]))).unwrap();
    assert_eq!(
        p.sinks.zenoh,
        Some(ZenohPlan {
            config: None,
            overrides: vec![],
            ros_domain_id: 0,
            ros_distro: Distro::Jazzy,
            shm_mb: 128,
        })
    );
    let s = &p.queues[0].sensors[0];
    assert_eq!(
        (s.topic.as_str(), s.frame_id.as_str()),
        ("/lidar/front/points", "front")
    );
    // The environment's ROS_DOMAIN_ID, unless the flag says otherwise; each checked.
    let s = zen(settings(vec![sensor("front", 2368)]));
    let id = |s: &Settings, e: &Ros2Env| {
        build(s.clone(), None, e).map(|p| p.sinks.zenoh.unwrap().ros_domain_id)
    };
    assert_eq!(id(&s, &env("7")).unwrap(), 7);
    let mut flagged = s.clone();
    flagged.ros2.ros_domain_id = Some(valid::Ranged::new(9).unwrap());
    assert_eq!(id(&flagged, &env("7")).unwrap(), 9);
    assert_eq!(
        id(&s, &env("233")).unwrap_err().to_string(),
        "ROS_DOMAIN_ID: 233 is out of range; valid 0..=232"
    );
    assert_eq!(
        id(&s, &env("x")).unwrap_err().to_string(),
        "ROS_DOMAIN_ID: \"x\" is not a number; valid 0..=232 (or pass --ros-domain-id)"
    );
    // Topic rules, uniqueness, frame_id.
    assert!(
        err(zen(settings(vec![sensor("front-left", 2368)])))
            .starts_with("sensors[0].topic = \"/lidar/front-left/points\": ")
    );
    let mut a = sensor("a", 2368);
    a.topic = Some("/lidar/points".into());
    let mut b = sensor("b", 2369);
    b.topic = Some("/lidar/points".into());
    assert_eq!(
        err(zen(settings(vec![a, b]))),
        "sensors[1].topic: /lidar/points is already sensors[0]'s topic; topics must be unique"
    );
    let mut a = sensor("a", 2368);
    a.frame_id = Some(String::new());
    assert_eq!(
        err(zen(settings(vec![a]))),
        "sensors[0].frame_id: \"\" must be 1..=255 bytes without NUL"
    );
}

#[test]
fn cpus_need_one_per_thread() {
    let mut b = sensor("b", 2369);
    b.queue = Some(valid::Ranged::new(1).unwrap());
    let s = settings(vec![sensor("a", 2368), b]);
    assert!(
        build(s, Some(vec![0]), &Ros2Env::default())
            .unwrap_err()
            .to_string()
            .starts_with("--cpus: 1 CPUs given for 2 capture threads")
    );
    assert_eq!("0, 1".parse::<CpuList>(), Ok(CpuList(vec![0, 1])));
    assert_eq!(
        "0,x".parse::<CpuList>().unwrap_err().to_string(),
        "--cpus \"0,x\": expected comma-separated CPU numbers, e.g. 0,1"
    );
}

#[test]
fn socket_backends_put_every_sensor_on_one_thread() {
    let mut b = sensor("b", 2369);
    b.queue = Some(valid::Ranged::new(1).unwrap());
    let mut s = settings(vec![sensor("a", 2368), b]);
    s.capture.backend = Some(Backend::Recvmmsg);
    let p = plan(s).unwrap();
    assert_eq!(p.queues.len(), 1);
    assert_eq!(p.queues[0].iface, "-");
    assert_eq!(p.queues[0].sensors.len(), 2);
}

/// `nebula_compat` is per sensor, default false, read from the TOML key of that name.
#[test]
fn nebula_compat_is_a_per_sensor_key() {
    let a = toml_sensor(
        "name = \"a\"\nmodel = \"vlp16\"\ncalibration = \"c.yaml\"\nport = 2368\n\
         nebula_compat = true\n",
    );
    assert_eq!(a.nebula_compat, Some(true));
    let p = plan(settings(vec![a, sensor("b", 2369)])).unwrap();
    let flags: Vec<bool> = p.sensors().map(|s| s.nebula_compat).collect();
    assert_eq!(flags, [true, false]);
    assert!(toml::from_str::<SensorSettings>("nebula_compat = 1").is_err());
}

/// `point_type` is per sensor, default `autoware`, read from the TOML key of that name; an
/// unknown name is refused naming the key and the valid set.
#[test]
fn point_type_is_a_per_sensor_key() {
    use lidarxdp_core::layout::PointType;
    let a = toml_sensor(
        "name = \"a\"\nmodel = \"vlp16\"\ncalibration = \"c.yaml\"\nport = 2368\n\
         point_type = \"velodyne\"\n",
    );
    assert_eq!(a.point_type, Some(PointType::Velodyne));
    let p = plan(settings(vec![a, sensor("b", 2369)])).unwrap();
    let types: Vec<PointType> = p.sensors().map(|s| s.point_type).collect();
    assert_eq!(types, [PointType::Velodyne, PointType::Autoware]);
    let e = toml::from_str::<SensorSettings>("point_type = \"pcl\"")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(
            "unknown point_type 'pcl'; valid: autoware, autoware_xyzirc, xyzi, velodyne, \
             ouster, ouster_xyzir, hesai, robosense"
        ) && e.contains("point_type"),
        "{e}"
    );
}

/// The full circle `fov = [0, 360]` (Nebula's default) is no field of view, and cut 360 is
/// accepted: the plan is that of no `fov` key and cut 0 (issue 39, class 5).
#[test]
fn a_full_circle_fov_is_no_fov() {
    let mut x = toml_sensor("fov = [0.0, 360.0]\ncut_angle = 360.0\n");
    x.name = Some("a".into());
    x.model = Some(SensorModel::Vlp16);
    x.calibration = Some("cal.yaml".into());
    let p = plan(settings(vec![x])).unwrap();
    assert_eq!(p.sensors().next().unwrap().fov, None);
    assert_eq!(p.sensors().next().unwrap().cut_angle.cdeg(), 0);
    let mut y = toml_sensor("fov = [270.0, 90.0]\n");
    y.name = Some("a".into());
    y.model = Some(SensorModel::Vlp16);
    y.calibration = Some("cal.yaml".into());
    let p = plan(settings(vec![y])).unwrap();
    assert_eq!(
        p.sensors().next().unwrap().fov.map(|f| f.degrees()),
        Some((270.0, 90.0))
    );
}

#[test]
fn ipv6_and_link_local_sources_are_sensors_and_bad_ones_are_refused() {
    let src = |s: &str| Some(s.parse::<valid::SourceAddr>().unwrap());
    let mut a = sensor("a", 2368);
    a.source = src("fe80::201%eth0");
    let mut b = sensor("b", 2368);
    b.source = src("fd00::202");
    let mut c = sensor("c", 2368);
    c.source = src("192.168.1.201");
    let p = plan(settings(vec![a.clone(), b, c])).unwrap();
    let got: Vec<String> = p
        .sensors()
        .map(|s| s.source.as_ref().unwrap().to_string())
        .collect();
    assert_eq!(got, ["fe80::201%eth0", "fd00::202", "192.168.1.201"]);
    // The same address with and without its zone is one source.
    let mut a2 = sensor("a2", 2368);
    a2.source = src("fe80::201");
    assert_eq!(
        err(settings(vec![a.clone(), a2])),
        "sensors[1].port: port 2368 from fe80::201 on eth0 is already sensors[0]'s; each \
         (port, source) names one sensor"
    );
    // A zone naming another interface than the sensor's.
    let mut z = sensor("z", 2368);
    z.source = src("fe80::201%eth1");
    assert_eq!(
        err(settings(vec![z])),
        "sensors[0].source: fe80::201%eth1 names interface eth1, but the sensor's packets \
         arrive on eth0; valid: fe80::201%eth0, or the address without a zone"
    );
    // IPv6 with a socket backend.
    let mut s = settings(vec![a]);
    s.capture.backend = Some(Backend::Socket);
    assert_eq!(
        err(s),
        "sensors[0].source: fe80::201%eth0 is an IPv6 source; the socket backend binds IPv4 \
         sockets only; valid: an IPv4 source, or --backend xdp"
    );
    // A bad address in the file names the key and the valid forms.
    for bad in [
        "fd00::1%eth0",
        "ff02::1",
        "0.0.0.0",
        "10.0.0.256",
        "fe80::1%",
    ] {
        let e = toml::from_str::<SensorSettings>(&format!("source = \"{bad}\""))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("source")
                && e.contains(&format!("{bad:?} is not a sensor's unicast source address"))
                && e.contains(valid::SourceAddr::VALID),
            "{e}"
        );
    }
    assert_eq!(
        toml_sensor("source = \"fe80::201%eth0\"").source,
        src("fe80::201%eth0")
    );
}
