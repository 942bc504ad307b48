/* io-mmap-cost.c — what storing into a fresh file costs on this machine, by route: pwrite by
 * P processes (each a contiguous 1/P), or fallocate + MAP_SHARED mapping + memcpy (mmap:
 * MADV_POPULATE_WRITE first; mmapnp: a fault per page), each process a contiguous 1/P
 * ("slice") or every process storing interleaved 2560-byte pieces over the whole file
 * ("share": the BT-IO pattern at N=128, where several processes touch each page).
 * Prints wall time, CPU time (user + system of the processes) and minor faults.
 * Build: gcc -O2 -o io-mmap-cost bench/io-mmap-cost.c
 * Usage: io-mmap-cost pwrite|mmap|mmapnp P [share] [FILE] (default /tmp/io-mmap-cost.dat, 84 MiB) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  const char*mode=argv[1]; int P=atoi(argv[2]); int shared=argc>3&&!strcmp(argv[3],"share");
  size_t len=84UL<<20; const char*path=argc>4?argv[4]:"/tmp/io-mmap-cost.dat";
  unlink(path); int fd=open(path,O_RDWR|O_CREAT|O_TRUNC,0644);
  char*src=malloc(len); memset(src,7,len);
  if(strcmp(mode,"pwrite")) { if(fallocate(fd,0,0,len)){perror("fallocate");} }
  double t0=now();
  for(int p=0;p<P;p++){ if(fork()==0){
      size_t lo=shared?0:len/P*p, hi=shared?len:len/P*(p+1);
      if(!strcmp(mode,"pwrite")){ for(size_t o=lo;o<hi;o+=16<<20){size_t n=hi-o<(16<<20)?hi-o:(16<<20); pwrite(fd,src+o,n,o);} }
      else { char*m=mmap(0,len,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0);
        if(!strcmp(mode,"mmap")) madvise(m+lo,hi-lo,MADV_POPULATE_WRITE);
        if(shared){ /* each proc writes its 1/P of every 4096-byte page... in pieces of 2560 bytes interleaved */
          size_t piece=2560; for(size_t o=p*piece;o<len;o+=piece*P) memcpy(m+o,src+o,piece);
        } else memcpy(m+lo,src+lo,hi-lo);
        munmap(m,len);}
      _exit(0);} }
  for(int p=0;p<P;p++) wait(NULL);
  double t1=now(); struct rusage ru; getrusage(RUSAGE_CHILDREN,&ru);
  printf("%-7s P=%d %s %7.1f ms  cpu %.3f s  minflt %ld\n",mode,P,shared?"share":"slice",(t1-t0)*1e3,ru.ru_utime.tv_sec+ru.ru_utime.tv_usec*1e-6+ru.ru_stime.tv_sec+ru.ru_stime.tv_usec*1e-6,ru.ru_minflt);
  unlink(path); return 0;}
