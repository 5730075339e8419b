//! Decoder, scan-assembly and reassembly tests on the shared captures and synthetic packets
//! (no privileges): one test binary, one module per former file. Run with
//! `cargo test --release -p lidarxdp --test decode [module::test]`.

mod decode_autodetect;
mod decode_field_clock_step;
mod decode_field_speed_mode;
mod decode_frame_faults;
mod decode_hesai_golden;
mod decode_hesai_robustness;
mod decode_input;
mod decode_ipv6;
mod decode_ouster_fw3;
mod decode_ouster_golden;
mod decode_ouster_imu;
mod decode_ouster_layout;
mod decode_ouster_proptest;
mod decode_ouster_robustness;
mod decode_point_type_fields;
mod decode_point_types;
mod decode_robosense_faults;
mod decode_robosense_helios16p;
mod decode_robosense_proptest;
mod decode_robosense_synthetic;
mod decode_sequence_fov;
mod decode_time_faults;
mod decode_velodyne_blocks;
mod decode_velodyne_faults;
mod decode_velodyne_position;
mod decode_velodyne_proptest;
mod decode_velodyne_reference;
mod decode_velodyne_rules;
mod decode_velodyne_synthetic;
mod decode_velodyne_vlp32c_golden;
mod decode_velodyne_vls128_golden;
mod decode_vlp16_golden;
mod decode_vlp16_robustness;
mod decode_vlp16_strongest;
mod reassembly_ouster;
