//! CPU exceptions: every vector 0-31 reports on serial and fails the run,
//! so a bug shows as a message and exit status 35 rather than a silent
//! triple fault.
//!
//! The stubs are plain assembly (the `x86-interrupt` ABI is nightly-only):
//! each pushes a zero error code where the CPU pushes none, then its vector,
//! and jumps to a common path that calls [`exception_report`] with a pointer
//! to that frame. Nothing returns, so no register is saved.
//!
//! One fault is expected: a page fault on a user page being migrated (its
//! entry a migration entry) waits until the page is back and returns to
//! retry the access, as Linux's faults on migration entries do. The
//! page-fault stub saves the registers a call clobbers, asks
//! [`page_fault_wait`], and either returns or reports.

use crate::qemu::{ExitCode, exit};
use spin::Once;
use x86_64::VirtAddr;
use x86_64::registers::control::Cr2;
use x86_64::structures::idt::InterruptDescriptorTable;

core::arch::global_asm!(
    r#"
    .macro EXC_STUB n, has_error
    .p2align 4
exc_stub_\n:
    .if \has_error == 0
    push $0
    .endif
    push $\n
    jmp exc_common
    .endm

    .section .text
    .irp n, 0,1,2,3,4,5,6,7,9,15,16,18,19,20,22,23,24,25,26,27,28,31
    EXC_STUB \n, 0
    .endr
    .irp n, 8,10,11,12,13,17,21,29,30
    EXC_STUB \n, 1
    .endr

    .p2align 4
exc_stub_14:
    push %rax
    push %rcx
    push %rdx
    push %rsi
    push %rdi
    push %r8
    push %r9
    push %r10
    push %r11
    mov 72(%rsp), %rdi
    sub $8, %rsp
    call page_fault_wait
    add $8, %rsp
    pop %r11
    pop %r10
    pop %r9
    pop %r8
    pop %rdi
    pop %rsi
    pop %rdx
    pop %rcx
    test %al, %al
    pop %rax
    jz 1f
    add $8, %rsp
    iretq
1:
    push $14
    jmp exc_common

exc_common:
    mov %rsp, %rdi
    and $-16, %rsp
    call exception_report
    ud2

    .section .rodata
    .p2align 3
    .global exc_stub_table
exc_stub_table:
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    .quad exc_stub_\n
    .endr
"#,
    options(att_syntax)
);

unsafe extern "C" {
    static exc_stub_table: [u64; 32];
}

/// What the stubs leave on the stack, lowest address first.
#[repr(C)]
struct ExceptionFrame {
    vector: u64,
    error_code: u64,
    rip: u64,
    cs: u64,
    rflags: u64,
    rsp: u64,
    ss: u64,
}

static IDT: Once<InterruptDescriptorTable> = Once::new();

/// Installs the exception handlers.
pub fn init() {
    let idt = IDT.call_once(|| {
        let mut idt = InterruptDescriptorTable::new();
        // SAFETY: the stub table is 32 addresses emitted above.
        let stubs = unsafe { &exc_stub_table };
        for (vector, &addr) in stubs.iter().enumerate() {
            let addr = VirtAddr::new(addr);
            // SAFETY: each stub is a valid handler for its vector: it
            // expects the frame its vector's CPU push produces, and never
            // returns but for the page-fault stub, which restores what it
            // saved and drops the error code before `iretq`.
            unsafe {
                match vector {
                    0 => idt.divide_error.set_handler_addr(addr),
                    1 => idt.debug.set_handler_addr(addr),
                    2 => idt.non_maskable_interrupt.set_handler_addr(addr),
                    3 => idt.breakpoint.set_handler_addr(addr),
                    4 => idt.overflow.set_handler_addr(addr),
                    5 => idt.bound_range_exceeded.set_handler_addr(addr),
                    6 => idt.invalid_opcode.set_handler_addr(addr),
                    7 => idt.device_not_available.set_handler_addr(addr),
                    8 => idt.double_fault.set_handler_addr(addr),
                    10 => idt.invalid_tss.set_handler_addr(addr),
                    11 => idt.segment_not_present.set_handler_addr(addr),
                    12 => idt.stack_segment_fault.set_handler_addr(addr),
                    13 => idt.general_protection_fault.set_handler_addr(addr),
                    14 => idt.page_fault.set_handler_addr(addr),
                    16 => idt.x87_floating_point.set_handler_addr(addr),
                    17 => idt.alignment_check.set_handler_addr(addr),
                    18 => idt.machine_check.set_handler_addr(addr),
                    19 => idt.simd_floating_point.set_handler_addr(addr),
                    20 => idt.virtualization.set_handler_addr(addr),
                    21 => idt.cp_protection_exception.set_handler_addr(addr),
                    28 => idt.hv_injection_exception.set_handler_addr(addr),
                    29 => idt.vmm_communication_exception.set_handler_addr(addr),
                    30 => idt.security_exception.set_handler_addr(addr),
                    // 9, 15, 22-27, 31 are reserved: leave them absent.
                    _ => continue,
                };
            }
        }
        // SAFETY: the timer stub saves what it clobbers, acknowledges the
        // PIC and returns with `iretq`: a valid handler for IRQ 0.
        unsafe {
            idt[crate::timer::VECTOR].set_handler_addr(VirtAddr::new(crate::timer::stub_addr()));
        }
        // SAFETY: the shootdown and wake stubs save what they clobber,
        // signal end of interrupt to the local APIC and return with `iretq`;
        // the spurious stub only returns (no end of interrupt is due for it).
        unsafe {
            idt[crate::smp::SHOOTDOWN_VECTOR]
                .set_handler_addr(VirtAddr::new(crate::smp::shootdown_stub_addr()));
            idt[crate::smp::WAKE_VECTOR]
                .set_handler_addr(VirtAddr::new(crate::smp::wake_stub_addr()));
            idt[crate::smp::SPURIOUS_VECTOR]
                .set_handler_addr(VirtAddr::new(crate::smp::spurious_stub_addr()));
        }
        idt
    });
    idt.load();
}

/// Loads the exception table on the calling CPU (an application processor;
/// [`init`] has run on the bootstrap one).
pub fn load_on_this_cpu() {
    if let Some(idt) = IDT.get() {
        idt.load();
    }
}

/// The page-fault stub's question, with interrupts off, the faulting
/// address in CR2 and the error code as argument: `true` if the fault was
/// on a page being migrated and the move is done (the access is retried),
/// `false` to report it.
#[unsafe(no_mangle)]
extern "C" fn page_fault_wait(error: u64) -> bool {
    crate::user_pages::wait_for_migration(Cr2::read_raw(), error)
}

/// Reports an exception and fails the run.
#[unsafe(no_mangle)]
extern "C" fn exception_report(frame: &ExceptionFrame) -> ! {
    crate::serial::write_fmt_unlocked(format_args!(
        "\nEXCEPTION vector {} error {:#x} at rip {:#x} (cs {:#x} rflags {:#x} rsp {:#x} ss {:#x}) cr2 {:#x}\n",
        frame.vector,
        frame.error_code,
        frame.rip,
        frame.cs,
        frame.rflags,
        frame.rsp,
        frame.ss,
        Cr2::read_raw(),
    ));
    crate::println!("RESULT: FAIL (exception)");
    exit(ExitCode::Fail)
}
