//! The symbols roce-emu exports but does not implement, each answering as
//! rdma-core does for an operation the device lacks:
//!
//! - the IBVERBS_1.0 compat ABI (programs built against libibverbs before
//!   2006): NULL or ENOSYS;
//! - the 1.0-only kernel-struct copy helpers: no-ops (there is no kernel);
//! - IBVERBS_PRIVATE_34, the provider interface (`ibv_cmd_*`, `verbs_*`):
//!   nothing can load a provider into this library, so every call answers
//!   EOPNOTSUPP (NULL for pointers).

use crate::util::set_errno;
use libc::{c_int, c_uint, c_void};
use std::ptr;

macro_rules! ptr_stub {
    ($($sym:literal => $f:ident),* $(,)?) => {$(
        #[export_name = $sym]
        pub unsafe extern "C" fn $f() -> *mut c_void {
            set_errno(libc::ENOSYS);
            ptr::null_mut()
        }
    )*};
}
macro_rules! int_stub {
    ($err:expr; $($sym:literal => $f:ident),* $(,)?) => {$(
        #[export_name = $sym]
        pub unsafe extern "C" fn $f() -> c_int {
            set_errno($err);
            $err
        }
    )*};
}
macro_rules! void_stub {
    ($($sym:literal => $f:ident),* $(,)?) => {$(
        #[export_name = $sym]
        pub unsafe extern "C" fn $f() {}
    )*};
}

// IBVERBS_1.0: the compat ABI.
ptr_stub!(
    "roce_ibv_get_device_list_1_0" => ibv_get_device_list_1_0,
    "roce_ibv_get_device_name_1_0" => ibv_get_device_name_1_0,
    "roce_ibv_open_device_1_0" => ibv_open_device_1_0,
    "roce_ibv_alloc_pd_1_0" => ibv_alloc_pd_1_0,
    "roce_ibv_reg_mr_1_0" => ibv_reg_mr_1_0,
    "roce_ibv_create_cq_1_0" => ibv_create_cq_1_0,
    "roce_ibv_create_srq_1_0" => ibv_create_srq_1_0,
    "roce_ibv_create_qp_1_0" => ibv_create_qp_1_0,
    "roce_ibv_create_ah_1_0" => ibv_create_ah_1_0,
);
void_stub!(
    "roce_ibv_free_device_list_1_0" => ibv_free_device_list_1_0,
    "roce_ibv_ack_async_event_1_0" => ibv_ack_async_event_1_0,
    "roce_ibv_ack_cq_events_1_0" => ibv_ack_cq_events_1_0,
);
int_stub!(libc::ENOSYS;
    "roce_ibv_attach_mcast_1_0" => ibv_attach_mcast_1_0,
    "roce_ibv_close_device_1_0" => ibv_close_device_1_0,
    "roce_ibv_dealloc_pd_1_0" => ibv_dealloc_pd_1_0,
    "roce_ibv_dereg_mr_1_0" => ibv_dereg_mr_1_0,
    "roce_ibv_destroy_ah_1_0" => ibv_destroy_ah_1_0,
    "roce_ibv_destroy_cq_1_0" => ibv_destroy_cq_1_0,
    "roce_ibv_destroy_qp_1_0" => ibv_destroy_qp_1_0,
    "roce_ibv_destroy_srq_1_0" => ibv_destroy_srq_1_0,
    "roce_ibv_detach_mcast_1_0" => ibv_detach_mcast_1_0,
    "roce_ibv_get_async_event_1_0" => ibv_get_async_event_1_0,
    "roce_ibv_get_cq_event_1_0" => ibv_get_cq_event_1_0,
    "roce_ibv_get_device_guid_1_0" => ibv_get_device_guid_1_0,
    "roce_ibv_modify_qp_1_0" => ibv_modify_qp_1_0,
    "roce_ibv_modify_srq_1_0" => ibv_modify_srq_1_0,
    "roce_ibv_query_device_1_0" => ibv_query_device_1_0,
    "roce_ibv_query_gid_1_0" => ibv_query_gid_1_0,
    "roce_ibv_query_pkey_1_0" => ibv_query_pkey_1_0,
    "roce_ibv_query_port_1_0" => ibv_query_port_1_0,
    "roce_ibv_query_qp_1_0" => ibv_query_qp_1_0,
    "roce_ibv_query_srq_1_0" => ibv_query_srq_1_0,
    "roce_ibv_resize_cq_1_0" => ibv_resize_cq_1_0,
);

// IBVERBS_1.0 kernel-struct helpers: nothing to copy without a kernel.
void_stub!(
    "ibv_copy_path_rec_from_kern" => ibv_copy_path_rec_from_kern,
    "ibv_copy_path_rec_to_kern" => ibv_copy_path_rec_to_kern,
    "ibv_copy_qp_attr_from_kern" => ibv_copy_qp_attr_from_kern,
    "ibv_copy_ah_attr_from_kern" => ibv_copy_ah_attr_from_kern,
    "roce_ibv_register_driver" => ibv_register_driver,
);

// IBVERBS_PRIVATE_34: the provider interface.
ptr_stub!(
    "_verbs_init_and_alloc_context" => verbs_init_and_alloc_context,
    "verbs_open_device" => verbs_open_device,
);
void_stub!(
    "__verbs_log" => verbs_log,
    "verbs_register_driver_34" => verbs_register_driver_34,
    "verbs_set_ops" => verbs_set_ops,
    "verbs_uninit_context" => verbs_uninit_context,
);
int_stub!(libc::EOPNOTSUPP;
    "execute_ioctl" => execute_ioctl,
    "ibv_cmd_advise_mr" => ibv_cmd_advise_mr,
    "ibv_cmd_alloc_dm" => ibv_cmd_alloc_dm,
    "ibv_cmd_alloc_mw" => ibv_cmd_alloc_mw,
    "ibv_cmd_alloc_pd" => ibv_cmd_alloc_pd,
    "ibv_cmd_attach_mcast" => ibv_cmd_attach_mcast,
    "ibv_cmd_close_xrcd" => ibv_cmd_close_xrcd,
    "ibv_cmd_create_ah" => ibv_cmd_create_ah,
    "ibv_cmd_create_counters" => ibv_cmd_create_counters,
    "ibv_cmd_create_cq" => ibv_cmd_create_cq,
    "ibv_cmd_create_cq_ex" => ibv_cmd_create_cq_ex,
    "ibv_cmd_create_flow" => ibv_cmd_create_flow,
    "ibv_cmd_create_flow_action_esp" => ibv_cmd_create_flow_action_esp,
    "ibv_cmd_create_qp" => ibv_cmd_create_qp,
    "ibv_cmd_create_qp_ex" => ibv_cmd_create_qp_ex,
    "ibv_cmd_create_qp_ex2" => ibv_cmd_create_qp_ex2,
    "ibv_cmd_create_rwq_ind_table" => ibv_cmd_create_rwq_ind_table,
    "ibv_cmd_create_srq" => ibv_cmd_create_srq,
    "ibv_cmd_create_srq_ex" => ibv_cmd_create_srq_ex,
    "ibv_cmd_create_wq" => ibv_cmd_create_wq,
    "ibv_cmd_dealloc_mw" => ibv_cmd_dealloc_mw,
    "ibv_cmd_dealloc_pd" => ibv_cmd_dealloc_pd,
    "ibv_cmd_dereg_mr" => ibv_cmd_dereg_mr,
    "ibv_cmd_destroy_ah" => ibv_cmd_destroy_ah,
    "ibv_cmd_destroy_counters" => ibv_cmd_destroy_counters,
    "ibv_cmd_destroy_cq" => ibv_cmd_destroy_cq,
    "ibv_cmd_destroy_flow" => ibv_cmd_destroy_flow,
    "ibv_cmd_destroy_flow_action" => ibv_cmd_destroy_flow_action,
    "ibv_cmd_destroy_qp" => ibv_cmd_destroy_qp,
    "ibv_cmd_destroy_rwq_ind_table" => ibv_cmd_destroy_rwq_ind_table,
    "ibv_cmd_destroy_srq" => ibv_cmd_destroy_srq,
    "ibv_cmd_destroy_wq" => ibv_cmd_destroy_wq,
    "ibv_cmd_detach_mcast" => ibv_cmd_detach_mcast,
    "ibv_cmd_free_dm" => ibv_cmd_free_dm,
    "ibv_cmd_get_context" => ibv_cmd_get_context,
    "ibv_cmd_modify_cq" => ibv_cmd_modify_cq,
    "ibv_cmd_modify_flow_action_esp" => ibv_cmd_modify_flow_action_esp,
    "ibv_cmd_modify_qp" => ibv_cmd_modify_qp,
    "ibv_cmd_modify_qp_ex" => ibv_cmd_modify_qp_ex,
    "ibv_cmd_modify_srq" => ibv_cmd_modify_srq,
    "ibv_cmd_modify_wq" => ibv_cmd_modify_wq,
    "ibv_cmd_open_qp" => ibv_cmd_open_qp,
    "ibv_cmd_open_xrcd" => ibv_cmd_open_xrcd,
    "ibv_cmd_poll_cq" => ibv_cmd_poll_cq,
    "ibv_cmd_post_recv" => ibv_cmd_post_recv,
    "ibv_cmd_post_send" => ibv_cmd_post_send,
    "ibv_cmd_post_srq_recv" => ibv_cmd_post_srq_recv,
    "ibv_cmd_query_context" => ibv_cmd_query_context,
    "ibv_cmd_query_device_any" => ibv_cmd_query_device_any,
    "ibv_cmd_query_mr" => ibv_cmd_query_mr,
    "ibv_cmd_query_port" => ibv_cmd_query_port,
    "ibv_cmd_query_qp" => ibv_cmd_query_qp,
    "ibv_cmd_query_srq" => ibv_cmd_query_srq,
    "ibv_cmd_read_counters" => ibv_cmd_read_counters,
    "ibv_cmd_reg_dm_mr" => ibv_cmd_reg_dm_mr,
    "ibv_cmd_reg_dmabuf_mr" => ibv_cmd_reg_dmabuf_mr,
    "ibv_cmd_reg_mr" => ibv_cmd_reg_mr,
    "ibv_cmd_req_notify_cq" => ibv_cmd_req_notify_cq,
    "ibv_cmd_rereg_mr" => ibv_cmd_rereg_mr,
    "ibv_cmd_resize_cq" => ibv_cmd_resize_cq,
    "verbs_init_cq" => verbs_init_cq,
);

#[no_mangle]
pub unsafe extern "C" fn __ioctl_final_num_attrs() -> c_uint {
    0
}

/// rdma-core's flag for providers (a data symbol).
#[no_mangle]
pub static mut verbs_allow_disassociate_destroy: bool = false;
